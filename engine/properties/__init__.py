"""The property suite: directed graphs labelled by 16 relation properties, GNN poolings compared on them.

Modules: :mod:`~engine.properties.definitions` (the properties and their checkers), :mod:`~engine.properties.sat`
(solver sampling), :mod:`~engine.properties.datasets` (GraphRandom / GraphPerturb and their cache).
"""
