"""Atomic file writes and safe reads, the ground floor of every file derl writes or reads back.

- ``reads``: ``open_file`` (a regular file only: never through a symbolic link, never blocking on a
  FIFO), ``read_bytes``, ``read_json`` and ``read_yaml`` with their bounds, and the errors naming the file.
- ``folders``: folders opened and made without following a symbolic link below a shared folder
  (``open_folder``, ``make_folders``, ``confine_writes``).
- ``writes``: atomic writes through a folder's descriptor (``atomic_write_bytes``/``_text``,
  ``write_json``) and exclusive creation (``create_exclusive``).
- ``outputs``: where a tool may write (``check_output``): never inside a search's folder but its own
  documented place, never over a file unasked, never a path that is not UTF-8.

Every file another process may read is written to a temporary file in the same
folder, flushed to disk, then renamed over the target with ``os.replace``: a
reader sees the old file or the new one, never half of one.

Files get the mode a plain ``open(path, "w")`` would give them, ``0o666`` less the
process's umask (the temporary file is created with that mode; ``tempfile.mkstemp`` would
make it ``0o600``, unreadable by the other users of a shared filesystem): with the usual
umask 022 they are 0644, readable by the group; with umask 002 (a group sharing one output folder) 0664. The umask
stays the operator's choice, as for every other program writing there; folders are
made by ``mkdir`` and follow it the same way (0755 or 0775).

A shared folder is untrusted input (docs/design/run-folder.md#the-output-folder-is-untrusted-input): files
are opened with ``open_file``, never through a symbolic link and never blocking on a FIFO, and
only regular files are read; ``read_json`` and ``read_yaml`` bound the size and the nesting depth
they accept (and YAML's aliases, which can multiply a small file into a huge tree, are refused).
A write goes through its folder's descriptor and the temporary file and the rename are relative to
it; below a shared folder (a ``root``, or one that ``confine_writes`` named for the process) every
folder from there down is opened without following a symbolic link (``open_folder``): a folder
swapped for a link, at any moment, is refused (``NotAFolder``), never written through. A read takes
such a descriptor too (``read_bytes``/``read_json``'s ``dir_fd``): the folder checked is the one read.
"""
