"""Data files that ship inside a package on the Python package index, read where pip installed them, without
importing the package (``connectome`` from graspologic, ``moses`` from molsets, ``qm9`` from qm9pack).

Importing those packages would pull their whole dependency stack (graspologic imports numba, POT and umap; molsets
imports its generative models), and for two of them installing it whole is the problem itself: graspologic 3.4.4
holds numpy below 2 and brings some twenty packages, and molsets 0.3.1 pins pomegranate 0.12.0, which no longer
builds. Their data needs none of it: the files are found through the distribution's metadata
(:func:`importlib.metadata.distribution`, which reads ``*.dist-info`` only), so ``pip install --no-deps NAME`` is
enough. A source may also read the same files from a folder the user names (``path=DIR``), laid out as the
package lays them out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.errors import GaptuiError
from engine.files import fingerprint


@dataclass(frozen=True)
class PackagedData:
    """Where a source's files live inside an installed distribution, and how to install it.

    ``folder`` is the data folder relative to the distribution's root (``graspologic/datasets/mice``); ``files``
    the names a source cannot do without, relative to ``folder``; ``install`` what to run when the distribution is
    missing (named in the error line).
    """

    source: str
    distribution: str
    folder: str
    files: tuple[str, ...]
    install: str

    def locate(self, path: str = "") -> Path:
        """The data folder: ``path`` when given, else the installed distribution's; one :class:`GaptuiError` line
        when it is missing or lacks one of :attr:`files`."""
        if path:
            folder = Path(path).expanduser().resolve()
            if not folder.is_dir():
                what = "is not a folder" if folder.exists() else "does not exist"
                raise GaptuiError(f"{self.source}: --param path={path}: {folder} {what}")
            where = f"--param path={path}"
        else:
            folder = self.installed()
            where = f"the installed {self.distribution}"
        missing = [name for name in self.files if not (folder / name).exists()]
        if missing:
            raise GaptuiError(
                f"{self.source}: {folder} ({where}) lacks {', '.join(missing)}; expected the layout of "
                f"{self.distribution}'s {self.folder}/"
            )
        return folder

    def installed(self) -> Path:
        """The data folder of the installed distribution (nothing imported)."""
        from importlib.metadata import PackageNotFoundError, distribution

        try:
            dist = distribution(self.distribution)
        except PackageNotFoundError:
            raise GaptuiError(
                f"{self.source} reads the data files of the {self.distribution} package, which is not installed: "
                f"{self.install}; or name a folder laid out as its {self.folder}/ with --param path=DIR"
            ) from None
        return Path(str(dist.locate_file(self.folder)))


def files_print(folder: Path, names: list[str], split: str, label: str) -> dict[str, str]:
    """``{"<split>-<label>": SHA-256}``: one digest of the files ``names`` of ``folder`` (of the lines ``name
    sha256`` of each, sorted), what a dataset's statistics record of the files a split's graphs were read from."""
    import hashlib

    lines = sorted(f"{name} {fingerprint(folder / name)['sha256']}" for name in names)
    return {f"{split}-{label}": hashlib.sha256("\n".join(lines).encode()).hexdigest()}
