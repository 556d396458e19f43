from gaptui.cli.app import main

main()
