"""
``torch.distributed`` of the stand-in torch, with one backend, "nccl", that moves the real
bytes between the ranks over TCP, so the time an operation takes is the network's.

Rendezvous (init_method env://, as torch reads it): rank 0 listens on MASTER_ADDR:MASTER_PORT;
every other rank connects there (retrying until the timeout), opens a data socket on the
address it reached the master from, and says where; rank 0 answers everyone with every
rank's address. Then each rank connects to the next rank's data socket and accepts the
previous rank's: a ring, as NCCL's ring algorithm uses. all_gather_into_tensor is the
ring's n-1 steps, all_reduce its reduce-scatter and all-gather (2(n-1) steps of S/n
bytes), which is where nccl-tests' bus-bandwidth factors come from; each step sends in a
thread while it receives. Reductions run in Python: keep the sizes small.

At init it logs NCCL's network lines, as NCCL does with NCCL_DEBUG=INFO: which network the
container would get is the NCCL stand-in's decision (../../nccl.py ``transport``), from the
devices and limits the docker stand-in passed; the bytes go over TCP either way.
"""

from __future__ import annotations

import importlib.util
import json
import operator
import os
import socket
import sys
import threading
import time
from array import array
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from types import ModuleType

from . import Tensor, zeros

NCCL_STANDIN = Path(__file__).resolve().parents[2] / "nccl.py"
DEFAULT_TIMEOUT = timedelta(minutes=10)  # torch's default for NCCL process groups


class ReduceOp:
    SUM = "sum"
    MIN = "min"
    MAX = "max"


REDUCERS: dict[str, Callable[[float, float], float]] = {
    ReduceOp.SUM: operator.add,
    ReduceOp.MIN: min,
    ReduceOp.MAX: max,
}


class DistBackendError(RuntimeError):
    """What torch raises when the NCCL backend fails (a peer gone, a timeout)."""


def nccl_standin() -> ModuleType:
    sys.dont_write_bytecode = True  # nothing written beside the stand-ins
    spec = importlib.util.spec_from_file_location("spark_twin_nccl", NCCL_STANDIN)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {NCCL_STANDIN}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lines(sock: socket.socket) -> socket.SocketIO:
    return sock.makefile("rwb")  # type: ignore[return-value]


def _send_json(sock: socket.socket, value: object) -> None:
    sock.sendall(json.dumps(value).encode() + b"\n")


def _read_json(reader) -> object:
    line = reader.readline()
    if not line:
        raise DistBackendError("a rank closed the rendezvous connection")
    return json.loads(line)


def _recv_exact(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise DistBackendError("the previous rank closed its connection")
        got += n


class _Group:
    def __init__(self, rank: int, size: int, master: str, port: int, timeout: float) -> None:
        self.rank, self.size = rank, size
        self.timeout = timeout
        self.send: socket.socket | None = None
        self.recv: socket.socket | None = None
        if size == 1:
            return
        deadline = time.monotonic() + timeout
        join = self._serve if rank == 0 else self._join
        table = join(master, port, deadline)
        self._ring(table, deadline)

    # -- rendezvous --------------------------------------------------------------------
    def _listen(self, address: str, port: int = 0) -> socket.socket:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((address, port))
        server.listen(self.size)
        return server

    def _serve(self, master: str, port: int, deadline: float) -> list[list]:
        store = self._listen(master, port)
        self.data = self._listen(master)
        table: list[list] = [[]] * self.size
        table[0] = [master, self.data.getsockname()[1]]
        peers: list[socket.socket] = []
        try:
            while len(peers) < self.size - 1:
                store.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    conn, _ = store.accept()
                except TimeoutError:
                    raise DistBackendError(
                        f"rank 0: {len(peers) + 1} of {self.size} ranks joined "
                        f"{master}:{port} before the timeout"
                    ) from None
                conn.settimeout(max(1.0, deadline - time.monotonic()))
                hello = _read_json(_lines(conn))
                assert isinstance(hello, dict)
                table[int(hello["rank"])] = [hello["addr"], int(hello["port"])]
                peers.append(conn)
            for conn in peers:
                _send_json(conn, table)
                conn.close()
        finally:
            store.close()
        return table

    def _join(self, master: str, port: int, deadline: float) -> list[list]:
        while True:
            try:
                conn = socket.create_connection((master, port), timeout=5)
                break
            except OSError as error:
                if time.monotonic() > deadline:
                    raise DistBackendError(
                        f"rank {self.rank}: no rendezvous at {master}:{port}: {error}"
                    ) from None
                time.sleep(0.2)
        mine = conn.getsockname()[0]  # the address this Spark reaches the head from
        self.data = self._listen(mine)
        _send_json(conn, {"rank": self.rank, "addr": mine, "port": self.data.getsockname()[1]})
        conn.settimeout(max(1.0, deadline - time.monotonic()))
        table = _read_json(_lines(conn))
        conn.close()
        assert isinstance(table, list)
        return table

    def _ring(self, table: list[list], deadline: float) -> None:
        following = table[(self.rank + 1) % self.size]
        self.send = socket.create_connection((following[0], int(following[1])), timeout=30)
        self.send.sendall(self.rank.to_bytes(4, "big"))
        self.data.settimeout(max(1.0, deadline - time.monotonic()))
        while self.recv is None:
            conn, _ = self.data.accept()
            hello = bytearray(4)
            _recv_exact(conn, memoryview(hello))
            if int.from_bytes(hello, "big") == (self.rank - 1) % self.size:
                self.recv = conn
            else:
                conn.close()
        self.data.close()
        for sock in (self.send, self.recv):
            sock.settimeout(self.timeout)  # an operation waits no longer than torch's would
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # -- one ring step: send to the next rank while receiving from the previous ----------
    def step(self, out: memoryview, into: memoryview) -> None:
        assert self.send is not None and self.recv is not None
        failed: list[BaseException] = []

        def send() -> None:
            try:
                assert self.send is not None
                self.send.sendall(out)
            except BaseException as error:  # noqa: BLE001 -- raised in the caller
                failed.append(error)

        sender = threading.Thread(target=send)
        sender.start()
        _recv_exact(self.recv, into)
        sender.join()
        if failed:
            raise DistBackendError(f"send to rank {(self.rank + 1) % self.size}: {failed[0]}")

    def close(self) -> None:
        for sock in (self.send, self.recv):
            if sock is not None:
                sock.close()


_group: _Group | None = None


def _current() -> _Group:
    if _group is None:
        raise ValueError(
            "Default process group has not been initialized, please make sure to call "
            "init_process_group."
        )
    return _group


def _log_network(size: int, rank: int) -> None:
    """NCCL's network lines (NCCL_DEBUG=INFO): the NCCL stand-in's own, else these."""
    if size < 2:
        return
    nccl = nccl_standin()
    kind, detail = nccl.transport(os.environ)
    if os.environ.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        return
    host, pid = socket.gethostname(), os.getpid()
    prefix = f"{host}:{pid}:{pid} [0]"
    if hasattr(nccl, "init_lines"):
        lines = list(nccl.init_lines(os.environ, host, pid))
    else:
        lines = [f"{prefix} NCCL INFO NET/{kind} : {detail}"]
    following, previous = (rank + 1) % size, (rank - 1) % size
    lines += [
        f"{prefix} NCCL INFO Channel 00/0 : {previous}[0] -> {rank}[0] [receive] via NET/{kind}/0",
        f"{prefix} NCCL INFO Channel 00/0 : {rank}[0] -> {following}[0] [send] via NET/{kind}/0",
    ]
    print("\n".join(lines), flush=True)


def init_process_group(
    backend: str = "nccl",
    init_method: str | None = None,
    timeout: timedelta | None = None,
    world_size: int = -1,
    rank: int = -1,
    **_: object,
) -> None:
    global _group
    if _group is not None:
        raise ValueError("trying to initialize the default process group twice!")
    if backend != "nccl":
        raise RuntimeError(f"the stand-in torch has the nccl backend only, not {backend!r}")
    if init_method not in (None, "env://"):
        raise RuntimeError(f"the stand-in torch rendezvouses with env:// only, not {init_method}")
    rank = int(os.environ["RANK"]) if rank < 0 else rank
    world_size = int(os.environ["WORLD_SIZE"]) if world_size < 0 else world_size
    master, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    seconds = (timeout or DEFAULT_TIMEOUT).total_seconds()
    _group = _Group(rank, world_size, master, port, seconds)
    _log_network(world_size, rank)


def is_initialized() -> bool:
    return _group is not None


def get_rank() -> int:
    return _current().rank


def get_world_size() -> int:
    return _current().size


def destroy_process_group() -> None:
    global _group
    if _group is not None:
        _group.close()
        _group = None


def _chunks(nbytes: int, itemsize: int, n: int) -> list[tuple[int, int]]:
    """Byte ranges of the n chunks of a tensor, on element boundaries."""
    count = nbytes // itemsize
    bounds = [i * count // n * itemsize for i in range(n + 1)]
    return list(zip(bounds, bounds[1:]))


def all_gather_into_tensor(output: Tensor, input: Tensor, **_: object) -> None:
    group = _current()
    n, rank = group.size, group.rank
    share = input.nbytes
    if output.nbytes != share * n:
        raise ValueError(
            f"output tensor of {output.nbytes} bytes is not world size {n} times the input's "
            f"{share}"
        )
    data = memoryview(output.data)
    data[rank * share : (rank + 1) * share] = input.data
    for s in range(n - 1):
        out, into = (rank - s) % n, (rank - s - 1) % n
        group.step(data[out * share : (out + 1) * share], data[into * share : (into + 1) * share])


def all_reduce(tensor: Tensor, op: str = ReduceOp.SUM, **_: object) -> None:
    group = _current()
    n, rank = group.size, group.rank
    if n == 1:
        return
    reduce = REDUCERS[op]
    code = tensor.dtype.code
    data = memoryview(tensor.data)
    chunks = _chunks(tensor.nbytes, tensor.dtype.itemsize, n)
    scratch = bytearray(max(end - start for start, end in chunks))
    for s in range(n - 1):  # reduce-scatter
        out, into = (rank - s) % n, (rank - s - 1) % n
        start, end = chunks[into]
        incoming = memoryview(scratch)[: end - start]
        group.step(data[slice(*chunks[out])], incoming)
        mine = data[start:end]
        ours, theirs = mine.cast(code), incoming.cast(code)  # type: ignore[call-overload]
        mine[:] = array(code, map(reduce, ours, theirs)).tobytes()
    for s in range(n - 1):  # all-gather of the reduced chunks
        out, into = (rank + 1 - s) % n, (rank - s) % n
        group.step(data[slice(*chunks[out])], data[slice(*chunks[into])])


def barrier(**_: object) -> None:
    all_reduce(zeros(1))
