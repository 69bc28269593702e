"""Exceptions raised by ferry's Python side.

Every message names the file (and, where it applies, the byte offset, rank,
record batch or field) and says what was expected and what was found, so a
user can act on it without reading ferry's source.
"""


class FerryError(Exception):
    """Base class of every error ferry raises on purpose."""


class ManifestError(FerryError, ValueError):
    """manifest.json is missing, unreadable or inconsistent."""


class MissingManifestError(ManifestError, FileNotFoundError):
    """The directory has no manifest.json: dataprep did not finish there."""


class ShardError(FerryError, ValueError):
    """A shard file is missing, has the wrong size or checksum, or its bytes
    do not match what the manifest says (bad magic, offsets out of range)."""


class MissingShardError(ShardError, FileNotFoundError):
    """A shard file named by the manifest does not exist."""


class StateError(FerryError, ValueError):
    """A loader state_dict cannot be applied to this loader (other data set,
    batch size, seed or shuffle policy)."""


class PackingError(FerryError, RuntimeError):
    """A model (with its attention implementation, transformers and torch
    versions) would let the documents of a packed row attend to each other,
    so :func:`ferry.check_packing` refuses it. The message says what to
    change."""


class ServeError(FerryError, RuntimeError):
    """ferry-serve refused a request or failed; ``code`` is the protocol's
    error code (1 bad request, 2 shard not served, 3 over a limit,
    4 shutting down, 5 daemon I/O error), 0 when none was sent."""

    def __init__(self, msg, code=0):
        super().__init__(msg)
        self.code = code


class DaemonGone(ServeError, ConnectionError):
    """The daemon is not running, exited, was killed or is shutting down."""


class ProtocolError(ServeError):
    """The peer does not speak this protocol version, or sent bad bytes."""


class CheckpointError(FerryError, ValueError):
    """A safetensors checkpoint is malformed: a truncated file, a header or
    data offsets past the end of the file, a bad dtype or shape. The message
    names the file and the tensor."""


class LoadError(FerryError, ValueError):
    """A checkpoint does not fit the model :func:`ferry.load_pretrained` was
    given (missing or unexpected keys, a shape or dtype mismatch), or the
    model's form is not supported."""
