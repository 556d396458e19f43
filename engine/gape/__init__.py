"""GAPE (the graph alignment paper, section 6): alignment embeddings as positional encodings for a downstream
molecule transformer.

- :mod:`engine.gape.data`: molecule datasets and per-(dataset, PE) encodings, cached on disk under content hashes;
- :mod:`engine.gape.pe`: the positional encodings (``none``, ``lap``, ``abs-lap``, ``r-lap``, ``rwpe``,
  ``gape:<run>``, ``gape:<run>+rwpe``);
- :mod:`engine.gape.embed`: the frozen model of a finished alignment run applied to any graphs;
- :mod:`engine.gape.transformer`: the downstream model; :mod:`engine.gape.train`: its training loop.
"""
