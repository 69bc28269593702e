"""Model files from the node's ``ferry-serve`` (Go: serve/weights.go), for
:func:`ferry.load_pretrained` with ``serve=SOCKET`` or an ``s3://`` path.

The daemon reads each file of the model once per node (ferry's Go readers,
ckpt.SourceFor: local and mounted files mapped, S3 by ranged GETs; 16 MiB
pieces, 8 at a time) into a sealed memfd that it passes to every
rank asking for it (SCM_RIGHTS); each rank maps it read-only, copies its own
shards' ranges out and unmaps it before moving on to the next file. Headers
and the index are small ranged reads for the asking rank only. Nothing is
created in /dev/shm: a memfd is gone with the last process holding it.

Messages (one connection per rank, one request at a time): MSG_FILE with the
JSON {"path", "file", "offset", "length"} (length -1: the whole file, shared
through the daemon's cache); MSG_FILE_DATA with {"size", "file_size"} and
the memfd, or {"missing": true}. A daemon that exits or is killed mid-load
gives :class:`ferry.DaemonGone`.
"""

import mmap
import os
import socket
import sys
import threading

import numpy as np

from .errors import CheckpointError, DaemonGone, ProtocolError, ServeError
from .protocol import (CODE_SHUTDOWN, MAX_MSG_SIZE, MSG_ERROR, MSG_FILE_DATA, encode_file_request, parse_error,
                       parse_file_data, parse_msg)

DEFAULT_SOCKET = "/tmp/ferry-serve.sock"


class ServeSource:
    """The files of one model directory, read through ferry-serve."""

    def __init__(self, path, serve=None, timeout=600.0):
        if not sys.platform.startswith("linux"):
            raise ServeError(f"{path}: ferry-serve needs Linux (memfd); this is {sys.platform}")
        self.path = path if path.startswith("s3://") else os.path.abspath(path)
        if serve is None or serve is True:
            serve = os.environ.get("FERRY_SERVE_SOCKET") or DEFAULT_SOCKET
        self.socket_path = os.fspath(serve)
        self.timeout = timeout
        self._lock = threading.Lock()
        self._sizes = {}
        self._maps = {}  # file -> [mmap, numpy view, users]
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        sock.settimeout(timeout)
        try:
            sock.connect(self.socket_path)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            sock.close()
            raise DaemonGone(f"no ferry-serve at {self.socket_path} ({e.strerror}): start one per node, e.g. "
                             f"`ferry-serve --socket {self.socket_path}`") from None
        self._sock = sock

    def name(self, file):
        return f"{self.path.rstrip('/')}/{file}" if file else self.path

    def _ask(self, file, offset, length):
        """(FileData dict, memfd or None)."""
        if self._sock is None:
            raise ServeError(f"{self.socket_path}: connection closed")
        gone = (f"ferry-serve at {self.socket_path} closed the connection while loading {self.name(file)}: "
                "the daemon exited or was killed; restart it and load again")
        try:
            self._sock.sendall(encode_file_request(self.path, file, offset, length))
            msg, fds, _, _ = socket.recv_fds(self._sock, MAX_MSG_SIZE + 1, 1)
        except socket.timeout:
            raise DaemonGone(f"ferry-serve at {self.socket_path}: no answer for {self.name(file)} within "
                             f"{self.timeout}s") from None
        except OSError as e:
            raise DaemonGone(f"{gone} ({e})") from None
        if not msg:
            for fd in fds:
                os.close(fd)
            raise DaemonGone(gone)
        typ, p = parse_msg(msg)
        if typ == MSG_ERROR:
            for fd in fds:
                os.close(fd)
            code, text = parse_error(p)
            cls = DaemonGone if code == CODE_SHUTDOWN else ServeError
            raise cls(f"{self.socket_path}: {text}", code)
        if typ != MSG_FILE_DATA:
            for fd in fds:
                os.close(fd)
            raise ProtocolError(f"{self.socket_path}: got message type {typ}, want FILEDATA ({MSG_FILE_DATA})")
        info = parse_file_data(p)
        if info["missing"]:
            return info, None
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise ProtocolError(f"{self.socket_path}: FILEDATA for {file} carries {len(fds)} descriptors, want 1")
        return info, fds[0]

    def _stat(self, file):
        if file not in self._sizes:
            with self._lock:
                info, fd = self._ask(file, 0, 0)
            if fd is not None:
                os.close(fd)
            self._sizes[file] = None if info.get("missing") else int(info.get("file_size", 0))
        return self._sizes[file]

    def exists(self, file):
        return self._stat(file) is not None

    def size(self, file):
        n = self._stat(file)
        if n is None:
            raise CheckpointError(f"{self.name(file)}: no such file")
        return n

    def read_head(self, file, n):
        """The first n bytes of file (a ranged read for this rank only)."""
        with self._lock:
            info, fd = self._ask(file, 0, n)
        if fd is None:
            raise CheckpointError(f"{self.name(file)}: no such file")
        try:
            size = int(info.get("size", 0))
            if size != n:
                raise ProtocolError(f"{self.socket_path}: asked {n} bytes of {file}, got {size}")
            with mmap.mmap(fd, max(n, 1), prot=mmap.PROT_READ) as m:
                return bytes(m[:n])
        finally:
            os.close(fd)

    def read_small(self, file):
        return self.read_head(file, self.size(file))

    def acquire(self, file):
        """Map the whole file (read once per node by the daemon)."""
        with self._lock:
            e = self._maps.get(file)
            if e is None:
                info, fd = self._ask(file, 0, -1)
                if fd is None:
                    raise CheckpointError(f"{self.name(file)}: no such file")
                try:
                    size = int(info.get("size", 0))
                    m = mmap.mmap(fd, max(size, 1), prot=mmap.PROT_READ)
                finally:
                    os.close(fd)
                e = self._maps[file] = [m, np.frombuffer(m, dtype=np.uint8, count=size), 0]
            e[2] += 1
            return e[1]

    def release(self, file):
        with self._lock:
            e = self._maps.get(file)
            if e is None:
                return
            e[2] -= 1
            if e[2] <= 0:
                del self._maps[file]
                e[1] = None
                try:
                    e[0].close()
                except BufferError:
                    pass  # a view still lives; the mapping goes with it

    def readinto(self, file, offset, buf):
        data = self.acquire(file)
        try:
            dst = np.frombuffer(memoryview(buf).cast("B"), dtype=np.uint8)
            if offset + len(dst) > len(data):
                raise CheckpointError(f"{self.name(file)}: bytes [{offset}, {offset + len(dst)}) are past the end "
                                      f"of the file ({len(data)} bytes)")
            dst[:] = data[offset:offset + len(dst)]
        finally:
            self.release(file)

    def close(self):
        for f in list(self._maps):
            e = self._maps.pop(f)
            e[1] = None
            try:
                e[0].close()
            except BufferError:
                pass
        if self._sock is not None:
            self._sock.close()
            self._sock = None
