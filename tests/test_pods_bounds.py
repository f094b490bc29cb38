"""Bounded pod sources: what `--pods` refuses to read, how much it reads, and what YAML it refuses.

An init container that hangs on a FIFO, or fills its memory from `/dev/zero`, blocks a GPU node's
device plugin; so does a few-line YAML file whose aliases expand into billions of nodes. Each of
these must end at once in a one-line usage error. Real file descriptors matter here (a pipe, a
terminal, a device on stdin), so the stdin cases run in a child process.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import yaml

import hamimig
from hamimig.errors import UsageError
from hamimig.pods import sources
from hamimig.pods.sources import MAX_POD_LIST_BYTES, read_pods_file, read_pods_text

DATA = Path(__file__).parent / "data" / "pods"
LIST_JSON = (DATA / "kubectl-list.json").read_bytes()
ALL_PODS = 9


@contextlib.contextmanager
def must_return_within(seconds: float) -> Iterator[None]:
    """Turns a hang (a blocking open, an endless expansion) into a failure, not a stuck run."""

    def expired(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def refused(path: str, match: str) -> str:
    with must_return_within(5), pytest.raises(UsageError, match=match) as info:
        read_pods_file(path, None)
    assert info.value.exit_code == 2
    assert "\n" not in info.value.message
    return info.value.message


# --- what a path may be ----------------------------------------------------------------------


def test_fifo_without_a_writer_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pods.fifo"
    os.mkfifo(fifo)
    message = refused(str(fifo), "FIFO")
    assert message == f"file {fifo}: is a named pipe (FIFO), not a regular file"


def test_device_is_refused() -> None:
    message = refused("/dev/zero", "character device")
    assert message == "file /dev/zero: is a character device, not a regular file"


def test_directory_and_socket_are_refused(tmp_path: Path) -> None:
    refused(str(tmp_path), r"^file .*: is a directory, not a regular file$")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "s.sock"))
        refused(str(tmp_path / "s.sock"), r"^file .*s\.sock: is a socket, not a regular file$")


def test_path_swapped_for_a_fifo_after_the_check_does_not_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file is opened non-blocking and checked again once open: a FIFO put in place between
    the check and the open is refused, not waited on.
    """
    fifo = tmp_path / "pods.fifo"
    os.mkfifo(fifo)
    regular = os.stat(DATA / "kubectl-list.json")
    real_stat = os.stat
    monkeypatch.setattr(
        sources.os, "stat", lambda p, *a, **k: regular if p == str(fifo) else real_stat(p, *a, **k)
    )
    refused(str(fifo), r"is a named pipe \(FIFO\), not a regular file$")


def test_symlink_to_a_file_is_read(tmp_path: Path) -> None:
    link = tmp_path / "pods.json"
    link.symlink_to(DATA / "kubectl-list.json")
    assert len(read_pods_file(str(link), None).pods) == ALL_PODS


# --- how much is read ------------------------------------------------------------------------


def test_file_over_256_mib_is_refused_unread(tmp_path: Path) -> None:
    assert MAX_POD_LIST_BYTES == 256 * 1024 * 1024
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(MAX_POD_LIST_BYTES + 1)  # sparse: no disk, no time
    start = time.monotonic()
    message = refused(str(big), "limit")
    assert message == f"file {big}: is larger than 256 MiB, the limit for a pod list"
    assert time.monotonic() - start < 1


def padded(size: int) -> bytes:
    doc = b'{"kind": "List", "items": []}'
    return doc + b" " * (size - len(doc))


def test_the_limit_is_inclusive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "MAX_POD_LIST_BYTES", 100)
    path = tmp_path / "pods.json"
    path.write_bytes(padded(100))
    assert read_pods_file(str(path), None).pods == ()
    path.write_bytes(padded(101))
    refused(str(path), r"is larger than 9\.53674e-05 MiB, the limit for a pod list$")


def test_a_file_that_grows_while_it_is_read_is_cut_at_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The size is checked when the file is opened, and the read stops at the limit anyway."""
    path = tmp_path / "pods.json"
    path.write_bytes(padded(100))
    real_read = os.read

    def growing(fd: int, n: int) -> bytes:
        return b" " * n  # as if a writer kept appending

    monkeypatch.setattr(sources, "MAX_POD_LIST_BYTES", 1 << 20)
    monkeypatch.setattr(sources.os, "read", growing)
    try:
        refused(str(path), "is larger than 1 MiB, the limit for a pod list$")
    finally:
        monkeypatch.setattr(sources.os, "read", real_read)


def test_file_time_is_its_modification_time(tmp_path: Path) -> None:
    path = tmp_path / "pods.json"
    path.write_bytes(LIST_JSON)
    os.utime(path, (1_700_000_000.25, 1_700_000_000.25))
    assert read_pods_file(str(path), None).taken_at == 1_700_000_000.25


# --- stdin, with real file descriptors -------------------------------------------------------

CHILD = """
import sys
import hamimig
from hamimig.errors import HamimigError
from hamimig.pods import sources
if len(sys.argv) > 1:
    sources.MAX_POD_LIST_BYTES = int(sys.argv[1])
try:
    snap = sources.read_pods_file("-", None)
except HamimigError as exc:
    print(exc.exit_code, exc.message)
else:
    print("ok", len(snap.pods), repr(snap.taken_at), repr(hamimig.PROCESS_STARTED))
"""


def child(stdin: Any, *args: str, data: bytes | None = None) -> str:
    argv = [sys.executable, "-c", CHILD, *args]
    if data is not None:  # a pipe
        ran = subprocess.run(argv, input=data, capture_output=True, timeout=30)
    else:
        ran = subprocess.run(argv, stdin=stdin, capture_output=True, timeout=30)
    assert ran.returncode == 0, ran.stderr.decode()
    assert ran.stderr == b""
    return ran.stdout.decode().strip()


def test_stdin_pipe_is_read_and_stamped_with_the_process_start() -> None:
    out = child(None, data=LIST_JSON).split()
    assert out[:2] == ["ok", str(ALL_PODS)]
    assert out[2] == out[3]  # taken_at is PROCESS_STARTED


def test_stdin_regular_file_is_stamped_with_its_modification_time(tmp_path: Path) -> None:
    path = tmp_path / "pods.json"
    path.write_bytes(LIST_JSON)
    os.utime(path, (1_700_000_000.5, 1_700_000_000.5))
    with open(path, "rb") as f:
        assert child(f).split()[:3] == ["ok", str(ALL_PODS), "1700000000.5"]


def test_stdin_socket_is_read_like_a_pipe() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.sendall(LIST_JSON)
        ours.shutdown(socket.SHUT_WR)
        assert child(theirs.fileno()).split()[:2] == ["ok", str(ALL_PODS)]


def test_stdin_device_is_refused() -> None:
    with open("/dev/zero", "rb") as zero:
        out = child(zero)
    assert out == "2 stdin: is a character device, not a pipe or a regular file"


def test_stdin_terminal_is_refused() -> None:
    leader, follower = pty.openpty()
    try:
        out = child(follower)
    finally:
        os.close(leader)
        os.close(follower)
    assert out == "2 stdin is a terminal; pipe the pod list in or name a pod list file"


def test_endless_stdin_pipe_is_cut_at_the_limit() -> None:
    with subprocess.Popen(["yes"], stdout=subprocess.PIPE) as endless:
        try:
            out = child(endless.stdout, str(1 << 20))
        finally:
            endless.kill()
    assert out == "2 stdin: is larger than 1 MiB, the limit for a pod list"


def test_stdin_regular_file_over_the_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pods.json"
    path.write_bytes(padded(2000))
    with open(path, "rb") as f:
        assert child(f, "1000") == (
            "2 stdin: is larger than 0.000953674 MiB, the limit for a pod list"
        )


class FakeTerminal:
    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        raise OSError("no descriptor")

    def read(self, n: int = -1) -> str:
        raise AssertionError("a terminal must not be read")


def test_stdin_streams_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stdin replaced in process (a test runner, an embedding program) is read bounded too."""
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(LIST_JSON.decode()))
    snap = read_pods_file("-", None)
    assert (len(snap.pods), snap.taken_at) == (ALL_PODS, hamimig.PROCESS_STARTED)
    monkeypatch.setattr(sources, "MAX_POD_LIST_BYTES", 100)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(padded(101))))
    with pytest.raises(UsageError, match=r"^stdin: is larger than .* MiB, the limit"):
        read_pods_file("-", None)
    monkeypatch.setattr("sys.stdin", FakeTerminal())
    with pytest.raises(UsageError, match=r"^stdin is a terminal"):
        read_pods_file("-", None)


# --- YAML that could expand ------------------------------------------------------------------


@pytest.fixture(params=["libyaml", "pure"])
def loader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each YAML case runs with libyaml's loader and with PyYAML's pure-Python one."""
    if request.param == "libyaml":
        if not hasattr(yaml, "CSafeLoader"):
            pytest.skip("PyYAML was built without libyaml")
    else:
        monkeypatch.delattr(yaml, "CSafeLoader")
    return str(request.param)


def billion_laughs(levels: int = 10) -> str:
    lines = ["kind: List", 'a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    lines.append(f"items: [{{kind: Pod, metadata: {{name: p, namespace: ns, x: *a{levels - 1}}}}}]")
    return "\n".join(lines) + "\n"


def merge_bomb(levels: int = 9) -> str:
    """Merge keys copy pairs for real while the document is built: 10**levels of them."""
    keys = ", ".join(f"k{i}: {i}" for i in range(10))
    lines = ["kind: List", "items: []", f"m0: &m0 {{{keys}}}"]
    for i in range(1, levels):
        refs = ", ".join([f"*m{i - 1}"] * 10)
        lines.append(f"m{i}: &m{i} {{<<: [{refs}]}}")
    return "\n".join(lines) + "\n"


def yaml_refused(text: str) -> str:
    with must_return_within(5), pytest.raises(UsageError) as info:
        read_pods_text(text, "file pods.yaml", None)
    message = info.value.message
    assert info.value.exit_code == 2
    assert "\n" not in message
    return message


@pytest.mark.parametrize("bomb", [billion_laughs, merge_bomb], ids=["aliases", "merge-keys"])
def test_alias_bombs_are_refused_at_once(loader: str, bomb: Any) -> None:
    start = time.monotonic()
    message = yaml_refused(bomb())
    assert time.monotonic() - start < 1
    assert message == (
        "file pods.yaml: uses a YAML anchor or alias (line 2, column 5): a pod list never "
        "needs them, and expanding them can make a small file describe millions of objects"
    ) or message.startswith("file pods.yaml: uses a YAML anchor or alias (line 3, column 5)")


@pytest.mark.parametrize(
    "text",
    [
        "kind: List\nitems: &i []\n",
        "kind: List\nitems:\n- &p {kind: Pod}\n",
        "kind: List\nitems: [&p {kind: Pod}]\n",
        "kind: List\nitems: []\nx: {a: 1, b: &x 2}\n",
        "kind: List\nitems: []\nx:\n    &x 1\n",
        "kind: List\nitems: []\nx: {? &x a : 1}\n",
        "kind: List\nitems: []\nx: [a,&x b]\n",
        "kind: List\nitems: []\nx: !!str &x b\n",
        "--- &x\nkind: List\nitems: []\n",
        "\ufeff&x {kind: List, items: []}\n",
        "kind: List\nitems: []\nx: &x-_9 b\ny: *x-_9\n",
    ],
)
def test_any_anchor_is_refused(loader: str, text: str) -> None:
    """Wherever YAML allows an anchor, both loaders refuse it (with libyaml, the quick scan for
    `&` must not miss one, or the document would be composed without the check).
    """
    assert any(
        getattr(event, "anchor", None) for event in yaml.parse(text, Loader=yaml.SafeLoader)
    ), "the case must hold a real anchor"
    assert "uses a YAML anchor or alias" in yaml_refused(text)


def test_ampersands_that_are_not_anchors_are_fine(loader: str) -> None:
    doc = json.loads(LIST_JSON)
    pod = doc["items"][0]
    pod["metadata"]["annotations"]["example.com/url"] = "https://x.example/?a=1&b=2"
    pod["spec"]["containers"][0]["args"] = ["sh", "-c", "sleep 1 && echo &x && echo & wait"]
    pod["metadata"]["annotations"]["example.com/amp"] = "&anchor-looking text"
    text = yaml.safe_dump(doc)
    assert "&" in text
    snap = read_pods_text(text, "x", None)
    assert snap == read_pods_text(LIST_JSON.decode(), "x", None)


def test_yaml_errors_found_by_the_anchor_scan_read_like_the_loaders(loader: str) -> None:
    message = yaml_refused("kind: List\n  bad: indent\nx: &x 1\n")
    assert message.startswith("file pods.yaml: is not valid YAML: ")
