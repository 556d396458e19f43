from gaptui.cli import main

main()
