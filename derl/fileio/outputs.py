"""Where a tool may write: the one check of every output path a user gives a tool (``--out``, ``--video``, ...).

Only the run-folder package (``derl.evolution.folder``) writes inside a search's ``OUT_DIR``: a path
at or below a folder that holds a search is refused, except the one place a tool documents there (the
report's ``OUT_DIR/report/``). A file that exists is never replaced unless the user asks (``--overwrite``).
A path that is not UTF-8 text is refused before anything is made: derl writes paths into JSON and YAML.
docs/reference/commands.md#output-paths states the rules for the user.
"""

from __future__ import annotations

import os
from pathlib import Path

# What marks a folder as a search's OUT_DIR (derl.evolution.folder.run_dir's layout): its config.yaml
# beside a folder only a search makes. A training of tools/train_ppo.py has config.yaml but none of these.
SEARCH_CONFIG = "config.yaml"
SEARCH_FOLDERS = ("manifest", "slots", "metadata")


class OutputRefused(ValueError):
    """An output path a tool must not write (module docstring); its message names the argument and the path."""


def holds_search(folder: str | Path) -> bool:
    """Whether ``folder`` is a search's ``OUT_DIR``: its ``config.yaml`` beside one of ``SEARCH_FOLDERS``."""
    folder = Path(folder)
    return os.path.lexists(folder / SEARCH_CONFIG) and any(os.path.isdir(folder / name) for name in SEARCH_FOLDERS)


def search_holding(path: str | Path) -> Path | None:
    """The search folder that ``path`` is or lies in (links resolved), or None."""
    real = Path(os.path.realpath(path))
    return next((folder for folder in (real, *real.parents) if holds_search(folder)), None)


def check_text(path: str | Path, what: str) -> None:
    """Refuses a path that cannot be written as UTF-8 (bytes that are not text, given on a command line).

    Raises:
        OutputRefused: naming ``what`` (e.g. ``--out``) and the path as far as it can be shown.
    """
    try:
        os.fspath(path).encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fspath(path).encode("utf-8", "backslashreplace").decode()
        raise OutputRefused(f"{what} {shown}: the path is not UTF-8 text; give another") from None


def check_output(path: str | Path, what: str, overwrite: bool = False, folder: bool = False,
                 own: str | Path | None = None) -> Path:
    """``path`` as given, once it is a place this tool may write (module docstring).

    Args:
        what: the argument that named it, for the message (``--video``).
        overwrite: the user asked to replace an existing file (a folder is never replaced, only written into).
        folder: ``path`` is a folder the tool writes into (``--out DIR``), not a file.
        own: the one folder inside a search where this tool documents that it writes (the report's
            ``OUT_DIR/report``): ``path`` may be that folder or lie below it.

    Raises:
        OutputRefused: the path is not UTF-8 text, lies in a search's ``OUT_DIR`` elsewhere than ``own``,
            is a file where a folder is asked for (or the other way round), or is a file that exists
            and ``overwrite`` was not given.
    """
    check_text(path, what)
    path = Path(path)
    search = search_holding(path)
    if search is not None:
        real = Path(os.path.realpath(path))
        if own is None or not real.is_relative_to(os.path.realpath(own)):
            where = "is a search's folder" if real == search else f"lies inside the search folder {search}"
            place = f" (this tool writes there only into {own})" if own is not None else ""
            raise OutputRefused(f"{what} {path}: {where}, which only the search writes{place}: give a path outside it")
    if folder:
        if os.path.lexists(path) and not path.is_dir():
            raise OutputRefused(f"{what} {path}: exists and is not a folder")
    elif path.is_dir():
        raise OutputRefused(f"{what} {path}: is a folder; give a file name")
    elif os.path.lexists(path) and not overwrite:
        raise OutputRefused(f"{what} {path}: exists; give --overwrite to replace it, or another path")
    return path


# The kinds of output a tool declares for ``check_outputs``: what each may already be.
OUTPUT_KINDS = {
    "file": "a file: an existing one only with --overwrite",
    "folder": "a folder written into (made if missing)",
    "appended": "a file added to, as the tool documents (it may exist)",
    "report": "a file the tool remakes on every run and replaces, as it documents (tools/gpu_check.py's report)",
    "search": "a search's OUT_DIR that the tool makes through the run-folder package (text checked only)",
}


def check_outputs(args: object, outputs: dict[str, str], overwrite: bool = False) -> None:
    """``check_output`` for each ``outputs`` entry, ``{dest: kind}`` (``OUTPUT_KINDS``), that ``args`` sets.

    A tool that takes an argparse namespace declares its outputs once (a benchmark's ``OUTPUTS``).

    Raises:
        OutputRefused: the first refused path, named by its flag (``--work``).
    """
    for dest, kind in outputs.items():
        path = getattr(args, dest, None)
        if path is None:
            continue
        what = "--" + dest.replace("_", "-")
        if kind not in OUTPUT_KINDS:
            raise ValueError(f"{what}: unknown output kind {kind!r}")
        if kind == "search":
            check_text(path, what)
        else:
            check_output(path, what, overwrite or kind in ("appended", "report"), folder=kind == "folder")
