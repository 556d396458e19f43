"""Tables of the CLI whose identifiers must survive being copied: run ids into ``show``, ``tag`` and ``note``,
dataset ids into ``datasets show``.

On a terminal a table is a Rich table whose identifier columns are never cut (no wrap, at their full width): the
other columns wrap or shorten to fit. Piped or redirected (``gaptui history | grep gin``), it is plain text, one
row a line, columns two spaces apart, every value complete whatever the width.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gaptui.columns import aligned

#: Columns whose values are all this short (a status, a seed, a number) are kept on one line.
SHORT = 8


def print_table(
    console: Console,
    title: str,
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    ids: Collection[int] = (0,),
    right: Collection[int] = (),
) -> None:
    """Print ``rows`` (plain text, never read as markup) under ``header``; the columns in ``ids`` (indices) hold
    identifiers, the columns in ``right`` are flush right."""
    if not console.is_terminal:
        if title:
            sys.stdout.write(title + "\n")
        sys.stdout.write("\n".join(aligned([list(header), *map(list, rows)], set(right))) + "\n")
        return
    # No box: a column costs its width and two spaces, so 80 columns hold a run's id and what it is. Columns
    # with nothing to show are left out.
    shown = [i for i in range(len(header)) if i in ids or any(row[i] for row in rows)]
    widths = {i: max((len(row[i]) for row in rows), default=0) for i in shown}
    names = {i: header[i] for i in shown}
    short = {i for i in shown if i not in ids and widths[i] <= SHORT}
    wide = [i for i in shown if i not in ids and i not in short]
    need = sum(max(widths[i], len(names[i])) for i in shown if i not in wide) + 2 * (len(shown) - 1)
    need += sum(min(widths[i], SHORT) for i in wide)
    while need > console.width:  # the short column whose header is longest past its values loses a character
        shrinkable = [k for k in short if len(names[k]) > max(widths[k], 2)]
        if not shrinkable:
            break
        i = max(shrinkable, key=lambda k: len(names[k]) - widths[k])
        names[i] = names[i][: len(names[i]) - 2] + "…"  # "duration" -> "durati…"
        need -= 1
    table = Table(title=escape(title) if title else None, box=None, pad_edge=False, header_style="bold")
    for i in shown:
        justify = "right" if i in right else "left"
        if i in ids:
            table.add_column(escape(names[i]), justify=justify, no_wrap=True, min_width=max(widths[i], len(names[i])))
        elif i in short:  # a status, a seed, a number: one line
            table.add_column(escape(names[i]), justify=justify, no_wrap=True)
        else:  # what a run is, a path: wraps, long words folded, nothing cut
            table.add_column(escape(names[i]), justify=justify, overflow="fold", min_width=min(widths[i], SHORT))
    for row in rows:
        table.add_row(*(escape(row[i]) for i in shown))
    console.print(table)
