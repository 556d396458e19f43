"""The terminal app's New-experiment form as a family declares it: fields (what they edit, never how they are
drawn) and the helpers that turn a form's values into a preset table and back."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.hardware import PRECISIONS

#: The kinds of :class:`FormField` and the type of their value in a form's ``values``:
#: ``multi`` (checkboxes over ``choices``: a list of the chosen values), ``numbers`` (a typed list of numbers:
#: ``list[float]``), ``seeds`` (``0-9, 12``: ``list[int]``), ``int`` / ``number`` (``int | None`` / ``float |
#: None``, blank is None), ``choice`` (one of ``choices``: ``str``), ``text`` and ``path`` (``str``), ``params``
#: (``key=value`` items: a dict of TOML values), ``bool`` and ``rows`` (repeated groups of the sub-fields
#: ``fields``, e.g. a base dataset and its parameters: ``list[dict]``, one values dict per row).
FORM_KINDS = ("multi", "numbers", "seeds", "int", "number", "choice", "text", "path", "params", "bool", "rows")


@dataclass(frozen=True)
class FormField:
    """One field of a family's New-experiment form: what it edits, never how it is drawn.

    ``key`` names the value in the form's ``values`` (and the widget); ``section`` groups fields under a title.
    ``choices`` lists the values of ``multi`` and ``choice`` fields, ``choices_from`` computes them (a registry:
    called once, off the terminal's UI thread, may import torch); ``label_of`` shows a choice (``0.12`` as
    ``12 %``). ``parse_item`` turns an extra item typed next to a ``multi`` list into a value (raises
    ``GaptuiError``); a ``multi`` field without it takes no typed items unless ``free`` (items kept as text, for
    ``module.path:Name`` import paths). ``fields`` are the sub-fields of a ``rows`` field; ``default`` is the value
    of a new form (a row's defaults: each sub-field's ``default``).
    """

    key: str
    label: str
    kind: str
    default: Any = None
    help: str = ""
    choices: tuple[Any, ...] = ()
    choices_from: Callable[[], Sequence[Any]] | None = None
    label_of: Callable[[Any], str] | None = None
    parse_item: Callable[[str], Any] | None = None
    free: bool = False
    fields: tuple[FormField, ...] = ()
    section: str = ""
    placeholder: str = ""
    #: For a ``rows`` field: placeholders of a row's sub-fields computed from its values (a base dataset's
    #: parameter defaults and split sizes), ``{sub-field key: text}``; called whenever a choice of the row changes.
    hints: Callable[[Mapping[str, Any]], Mapping[str, str]] | None = None

    def __post_init__(self) -> None:
        if self.kind not in FORM_KINDS:
            raise ValueError(f"form field '{self.key}': kind '{self.kind}' is not one of {', '.join(FORM_KINDS)}")
        if self.kind == "rows" and not self.fields:
            raise ValueError(f"form field '{self.key}': a rows field needs sub-fields")

    def show(self, choice: Any) -> str:
        """How a choice is listed."""
        return self.label_of(choice) if self.label_of else str(choice)


def drop_blank(table: Mapping[str, Any]) -> dict[str, Any]:
    """``table`` without its blank values (None, ``""``): what a form leaves empty is left out of the preset,
    so the family's defaults apply and a loaded preset is written back as it was."""
    return {k: v for k, v in table.items() if v is not None and v != ""}


def form_table(values: Mapping[str, Any], keys: Mapping[str, str], more: str = "") -> dict[str, Any]:
    """A preset table from form values: ``keys`` maps form keys to table keys (blank values left out), and the
    ``key=value`` field ``more`` adds the table's other keys."""
    table = drop_blank({name: values.get(key) for key, name in keys.items()})
    return {**table, **(values.get(more) or {})} if more else table


def table_values(table: Mapping[str, Any] | None, keys: Mapping[str, str], more: str = "") -> dict[str, Any]:
    """The inverse of :func:`form_table`: a preset table as form values (absent keys are blank)."""
    table = dict(table or {})
    out: dict[str, Any] = {key: table.pop(name, None) for key, name in keys.items()}
    if more:
        out[more] = table
    return out


class FamilyForm:
    """A family's New-experiment form (its ``form``): the fields, and the preset document a filled form means.

    ``values`` maps each field's key to its typed value (see :data:`FORM_KINDS`); the document
    :meth:`preset_from_form` returns (a raw TOML dict without ``task``, ``name``, ``description``) is validated by
    the family's ``parse_preset``, so form errors are preset errors; :meth:`form_values` fills the form from a
    loaded preset, and ``preset_from_form(form_values(raw))`` gives ``raw`` back."""

    def fields(self) -> tuple[FormField, ...]:
        """The fields of the form, in order."""
        raise NotImplementedError

    def preset_from_form(self, values: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def form_values(self, raw: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class FormModule(FamilyForm):
    """A form written as three functions of one module (``fields()``, ``preset_from_form(values)``,
    ``form_values(raw)``), imported on first use so that listing the families imports no form."""

    module: str

    def _functions(self) -> Any:
        return importlib.import_module(self.module)

    def fields(self) -> tuple[FormField, ...]:
        return tuple(self._functions().fields())

    def preset_from_form(self, values: dict[str, Any]) -> dict[str, Any]:
        return dict(self._functions().preset_from_form(values))

    def form_values(self, raw: dict[str, Any]) -> dict[str, Any]:
        return dict(self._functions().form_values(raw))


def precision_field(section: str) -> Any:
    """The ``precision`` field of a family's New-experiment form (a choice of :data:`PRECISIONS`; blank: the
    family's default, ``auto``), written into the preset's ``[run]`` table."""
    return FormField(
        "precision",
        "precision",
        "choice",
        None,
        "auto: bf16 only where measured as accurate and faster",
        choices=PRECISIONS,
        placeholder="auto",
        section=section,
    )
