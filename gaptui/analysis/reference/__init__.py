"""Reference results (a published table, another machine's export) and how our ranking compares with them.

The package: :mod:`.files` finds and parses reference files, :mod:`.protocol` sets their protocol beside ours,
:mod:`.compare` compares a ranking table with one, :mod:`.render` writes a comparison as a Rich table, Markdown,
CSV or JSON. Everything public is importable from here (``from gaptui.analysis import reference``).

Every task family may ship reference tables (its paper's), declared by the family (:mod:`engine.tasks`,
"Reference tables and optimal lines"). A reference file is CSV, the columns of ``gaptui export``'s ``tables.csv``
for that family (its table layout's axis keys, the cell's centre ``median`` or ``mean``, and ``std``; other
columns such as ``runs`` are ignored), preceded by optional ``# key: value`` lines::

    # source: Table D.3 of "Graph Alignment for Benchmarking Graph Neural Networks ..."
    # task: alignment              (the family; default: the family it is loaded for, see below)
    # metric: val_lap_acc          (default: the family's default metric)
    # units: percent               (percent or share; default share, as gaptui export writes accuracies)
    # table: NAME                  (optional: a derived table of the family, e.g. "Table 2: mean R score")
    # protocol: epochs=300, pairs=5000/500, noise_model=add_remove, seeds=10
    # protocol[aqsol]: pairs=7836/998, noise_model=add    (a group's own values, over the line above)
    dataset,model,noise,median,std
    er,gcn,0.12,49.5,0.9
    er,laplacian,0.12,7.5,         (std may be empty)

``protocol`` keys are the family's settings (:class:`engine.tasks.Setting`: alignment's ``epochs``, ``pairs``,
``batch``, ``budget``, ``noise_model``) and ``seeds`` (values per cell); a comparison prints them beside ours and
says when they differ (:mod:`gaptui.analysis.reference.protocol`). Any other line starting with ``#`` is a comment.

A file loaded for no family that names none is of the one family whose table layout its header has (an export of another
machine), else read as every reference was before families: alignment's (:data:`engine.tasks.LEGACY_TASK`). Shipped
references live in ``gaptui/references/`` as ``<task>.<name>.csv`` (``alignment.paper``: Table D.3, ``gape.paper``:
Table 1 of the alignment paper, ``properties.paper``: Table 2 of the property-suite paper); a family may also ship its
own (:class:`engine.tasks.References`). ``--reference NAME`` finds, for the family compared,
``<workspace>/references/<task>.NAME.csv`` or ``<workspace>/references/NAME.csv`` (first), then a shipped one, or takes
a path; loaded for no family, ``NAME`` must be one family's only.

Comparison, per table of ours that the reference covers (same table kind, same group) and per column of it:

- each cell: our centre, the reference's, and the difference ours - reference (metric units);
- Kendall's tau-b between our values and the reference's over the rows both have in that column (baseline rows,
  e.g. alignment's Laplacian, left out; ``None`` with fewer than two such rows);
- whether every row that is best in the reference in that column (ties: all of them) is marked best or within
  1 point of our best in our table (the marks of :mod:`gaptui.analysis`); ``None`` when we did not run it.
"""

from gaptui.analysis.reference.compare import (
    ColumnAgreement,
    Comparison,
    check_metric,
    compare,
    coordinates,
    covers,
    no_overlap,
    not_covered,
    reference_cell,
    shared_cells,
    uncovered_columns,
)
from gaptui.analysis.reference.files import (
    BUNDLED,
    CENTRES,
    META_KEYS,
    UNITS,
    Reference,
    ReferenceCell,
    find_reference,
    load_reference,
    parse_reference,
    reference_names,
)
from gaptui.analysis.reference.protocol import ProtocolComparison, compare_protocol, protocol_notes
from gaptui.analysis.reference.render import comparison_json, csv_columns, render_csv, render_markdown, render_rich

__all__ = [
    "BUNDLED",
    "CENTRES",
    "META_KEYS",
    "UNITS",
    "ColumnAgreement",
    "Comparison",
    "ProtocolComparison",
    "Reference",
    "ReferenceCell",
    "check_metric",
    "compare",
    "compare_protocol",
    "comparison_json",
    "coordinates",
    "covers",
    "csv_columns",
    "find_reference",
    "load_reference",
    "no_overlap",
    "not_covered",
    "parse_reference",
    "protocol_notes",
    "reference_cell",
    "reference_names",
    "render_csv",
    "render_markdown",
    "render_rich",
    "shared_cells",
    "uncovered_columns",
]
