"""Where the pod list comes from: a kubectl dump (file or stdin) or the Kubernetes API.

Both funnel into one reader of the raw document that touches only the fields that decide: model
objects for 10,000 pods would cost seconds at node start, when recovery runs. No list is ever
silently partial, as a missing pod would look like a released instance (docs/formats.md).
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import json
import os
import re
import select
import stat
import sys
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import hamimig
from hamimig.errors import UsageError
from hamimig.pods.annotation import ANNOTATION, AnnotationError, MigAllocation, decode_allocations
from hamimig.pods.identity import mapping, node_identity_from
from hamimig.pods.model import TERMINAL_PHASES, NodeIdentity, Pod
from hamimig.pods.model import PodSnapshot as PodSnapshot
from hamimig.pods.model import PodSourceError as PodSourceError
from hamimig.store._fields import check_namespace, check_pod_name, check_pod_uid, named
from hamimig.store.yamlload import DuplicateKey, refusing_duplicates
from hamimig.store.yamlload import load as load_yaml
from hamimig.vocabulary import Setting

KUBE_PAGE_SIZE = 500
"""Pods per API request: large enough for few round trips, small enough for the server's limits."""

KUBE_INSTALL_HINT = "the Kubernetes client is not installed: pip install 'hamimig[kube]'"

MAX_POD_LIST_BYTES = 256 * 1024 * 1024
"""The most a pod source may send: a file, stdin, or all the API's answers to one listing together.

Ten times the biggest real list (10,000 pods of kubectl JSON are about 40 MB), and small enough that
reading it, with the parse that follows, fits the memory of the init container that runs recovery.
"""

_CHUNK = 1024 * 1024
_ERROR_BODY_BYTES = 64 * 1024
"""Enough of an error answer to quote the API's message; the rest is never read."""

_STDIN_TERMINAL = "stdin is a terminal; pipe the pod list in or name a pod list file"

_FIRST_NON_SPACE = re.compile(r"\S")

# Where YAML can start an anchor (`&name`, name characters as both PyYAML scanners accept them):
# at the start, after blank space, or after a flow indicator, `:` or `?`. An `&` anywhere else, as
# in `?a=1&b=2` or `a && b`, is part of a scalar, so a list without a match cannot hold an anchor,
# and without an anchor it cannot hold an alias.
_ANCHOR_LIKE = re.compile(r"(?<![^\s\[\]{},:?\ufeff])&[0-9A-Za-z_-]")


class _Malformed(ValueError):
    """The document is not a pod list; the caller decides whose fault that is."""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _failed(source: str, text: str) -> PodSourceError:
    """The pod state is unverifiable (exit 5): `text` from the API, on one line."""
    return PodSourceError(_one_line(f"{source}: {text}"))


def _opt_str(value: Any, where: str, field: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    # An unquoted timestamp in hand-written YAML arrives as a datetime; kubectl quotes them.
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    raise _Malformed(f"{where}: {field} is not a string")


def _named(meta: dict[str, Any], where: str) -> tuple[str, str]:
    """The pod's namespace and name, checked as the API server checks them (a record naming the
    pod as owner needs them valid), with its UID."""
    name = meta.get("name")
    namespace = meta.get("namespace")
    if not isinstance(name, str) or not name:
        raise _Malformed(f"{where}: pod has no metadata.name")
    if not isinstance(namespace, str) or not namespace:
        raise _Malformed(f"{where}: pod {name} has no metadata.namespace")
    try:
        named(check_namespace, namespace, "metadata.namespace")
        named(check_pod_name, name, "metadata.name")
        named(check_pod_uid, meta.get("uid"), "metadata.uid")
    except ValueError as exc:
        raise _Malformed(f"{where}: {exc}") from None
    return namespace, name


def _claim(raw: Any) -> tuple[tuple[MigAllocation, ...], str | None]:
    """The allocations an annotation value claims, or why it cannot be read. An absent or empty
    value carries no claim at all; only a claim that cannot be read is an error."""
    if raw is None:
        return (), None
    if not isinstance(raw, str):
        return (), "annotation value is not a string"
    if not raw.strip():
        return (), None
    try:
        return decode_allocations(raw), None
    except AnnotationError as exc:
        return (), str(exc)


def _pod(item: Any, where: str, node: str | None) -> Pod | None:
    """One pod from its manifest, or None when it is another node's and claims nothing: only
    a decodable claim is of use to `verify_node`, and decoding the rest would slow every parse.
    An unbound pod is kept: HAMi annotates before it binds, so its claim is already real."""
    if not isinstance(item, dict):
        raise _Malformed(f"{where} is not an object")
    kind = item.get("kind")
    # Items of an API PodList carry no kind; kubectl adds "Pod". Anything else is not a pod.
    if kind is not None and kind != "Pod":
        raise _Malformed(f"{where} has kind {kind!r}, not Pod")
    meta = mapping(item.get("metadata"), f"{where}: metadata", _Malformed)
    namespace, name = _named(meta, where)
    where = f"{where} ({namespace}/{name})"
    spec = mapping(item.get("spec"), f"{where}: spec", _Malformed)
    node_name = _opt_str(spec.get("nodeName"), where, "spec.nodeName")
    # Validate before filtering so that a broken pod elsewhere in the list is not silently skipped.
    uid = _opt_str(meta.get("uid"), where, "metadata.uid")
    deletion = _opt_str(meta.get("deletionTimestamp"), where, "metadata.deletionTimestamp")
    status = mapping(item.get("status"), f"{where}: status", _Malformed)
    phase = _opt_str(status.get("phase"), where, "status.phase")
    raw = mapping(meta.get("annotations"), f"{where}: annotations", _Malformed).get(ANNOTATION)
    elsewhere = node is not None and node_name != node
    if elsewhere and (not isinstance(raw, str) or deletion is not None or phase in TERMINAL_PHASES):
        return None
    allocations, error = _claim(raw)
    if elsewhere and not allocations:
        return None  # an unreadable claim on another node is that node's business
    return Pod(namespace, name, uid, node_name, phase, deletion, allocations, error)


def _pods_of(doc: Any, node: str | None) -> tuple[list[Pod], str | None]:
    """The pods of one `PodList`/`List` document that `_pod` keeps, and its continue token:
    one page of a longer list, which the API source follows and a file reports incomplete."""
    if not isinstance(doc, dict):
        got = "an array" if isinstance(doc, list) else type(doc).__name__
        raise _Malformed(f"expected a PodList or List object, got {got}")
    kind = doc.get("kind")
    if kind == "Pod":
        # One pod says nothing of the node's other pods: judged by it, every instance they
        # hold would look free.
        raise _Malformed(
            "is a single Pod, not the node's pod list (kind List or PodList, as 'kubectl get "
            "pods -o json' prints it)"
        )
    if kind not in ("PodList", "List") and (kind is not None or "items" not in doc):
        raise _Malformed(f"expected kind PodList or List, got {kind!r}")
    if "items" not in doc:  # kubectl and the API always write it; a list without is cut
        raise _Malformed(f"the {kind} has no items key")
    # Go marshals an empty slice it never allocated as null.
    items = [] if doc["items"] is None else doc["items"]
    if not isinstance(items, list):
        raise _Malformed("items is not a list")
    pods = [pod for i, item in enumerate(items) if (pod := _pod(item, f"item {i}", node))]
    token = mapping(doc.get("metadata"), "list: metadata", _Malformed).get("continue")
    if token is not None and not isinstance(token, str):
        raise _Malformed("metadata.continue is not a string")
    return pods, token or None


def _snapshot(found: list[Pod], node: str | None, source: str, **fields: Any) -> PodSnapshot:
    """`found` split into the pods on `node`, the unbound ones and the other nodes' (all of
    them on `node` without one); two entries for one pod could disagree about its allocations,
    so neither can be believed (`_Malformed`)."""
    pods = [p for p in found if node is None or p.node_name == node]
    unbound = [p for p in found if node is not None and not p.node_name]
    elsewhere = [p for p in found if node is not None and p.node_name and p.node_name != node]
    seen: set[str] = set()
    for pod in pods + unbound:
        if pod.key in seen:
            raise _Malformed(f"pod {pod.key} appears more than once")
        seen.add(pod.key)
    return PodSnapshot(
        pods=tuple(pods),
        source=source,
        elsewhere=tuple(elsewhere),
        unbound=tuple(unbound),
        **fields,
    )


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Parsing a pod list allocates millions of containers, none in a reference cycle, and the
    collections they trigger cost about as much as the parse while finding nothing. Keep it
    paused until the document is reduced to `Pod`s and dropped, or the collector walks it then."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _yaml_problem(exc: Exception) -> str:
    """PyYAML's message without its multi-line source excerpt: errors here are one line."""
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    mark = getattr(exc, "problem_mark", None)
    if not isinstance(problem, str):
        return str(exc)
    text = f"{context}: {problem}" if isinstance(context, str) else problem
    if mark is not None:
        text += f" (line {mark.line + 1}, column {mark.column + 1})"
    return text


def _load_document(text: str) -> Any:
    """JSON when it looks like JSON (fast), YAML otherwise. Never retried as YAML: kubectl's
    YAML never starts with `{` or `[`, and re-parsing a truncated 10 MB JSON dump as YAML
    would take seconds only to report a less useful error."""
    if text.startswith("\ufeff"):
        text = text[1:]
    first = _FIRST_NON_SPACE.search(text)
    if first is None:
        raise _Malformed("is empty; expected a PodList, List or Pod")
    if first.group() in "{[":
        try:
            return json.loads(text)
        except ValueError as exc:  # JSONDecodeError, or a number too long to convert
            raise _Malformed(f"is not valid JSON: {exc}") from None
        except RecursionError:
            raise _Malformed("is not valid JSON: nested too deeply") from None

    import yaml  # lazily: only YAML input pays for it

    try:
        return load_yaml(text, _yaml_loader(text))
    except DuplicateKey as exc:
        raise _Malformed(str(exc)) from None
    except _AnchorFound as exc:
        raise _Malformed(
            f"uses a YAML anchor or alias{exc}: a pod list never needs them, and expanding "
            "them can make a small file describe millions of objects"
        ) from None
    except yaml.YAMLError as exc:
        raise _Malformed(f"is not valid YAML: {_yaml_problem(exc)}") from None
    except ValueError as exc:  # a scalar that resolves to a type it cannot become (2024-02-30)
        raise _Malformed(f"is not valid YAML: {exc}") from None
    except RecursionError:
        raise _Malformed("is not valid YAML: nested too deeply") from None


class _AnchorFound(Exception):
    """A YAML anchor or alias: refused before anything is built from the document."""


def _yaml_loader(text: str) -> Any:
    """libyaml's safe loader if installed (several times faster), else PyYAML's, refusing
    duplicate keys. A document with an anchor never reaches the composer ("billion laughs";
    merge keys copy for real): one with an `&` where an anchor could start is first run through
    the event parser (a third more time)."""
    import yaml

    loader = refusing_duplicates(getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    if "&" in text and _ANCHOR_LIKE.search(text) is not None:
        parser = loader(text)
        try:
            while parser.check_event():
                event = parser.get_event()
                if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                    mark = event.start_mark
                    raise _AnchorFound(f" (line {mark.line + 1}, column {mark.column + 1})")
        finally:
            parser.dispose()
    return loader


def read_pods_text(
    text: str, source: str, node: str | None, *, taken_at: float = 0.0
) -> PodSnapshot:
    """Pods from `kubectl get pods -o json|yaml` output; without `node`, every pod counts.

    `taken_at` is when the text is known to have been current (see `PodSnapshot.taken_at`).
    """
    try:
        with _gc_paused():
            pods, token = _pods_of(_load_document(text), node)
        # A saved page of a paginated list (`kubectl get --raw '...?limit=N'`): the pods it
        # leaves out may hold instances, so the engine must not act on it.
        return _snapshot(pods, node, source, complete=token is None, taken_at=taken_at)
    except _Malformed as exc:
        raise UsageError(_one_line(f"{source}: {exc}")) from None


def read_pods_file(path: str, node: str | None) -> PodSnapshot:
    """`-` is stdin, so `kubectl get pods -o json | hamimig recover --pods -` works. Bounded
    and file kinds checked, so `--pods /dev/zero` or a FIFO nobody writes to fails at once
    rather than filling memory or hanging an init container."""
    source = "stdin" if path == "-" else f"file {path}"
    try:
        data, taken_at = _read_stdin() if path == "-" else _read_path(path, source)
    except OSError as exc:
        raise UsageError(_one_line(f"{source}: cannot read: {exc.strerror or exc}")) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{source}: pod list is not UTF-8") from None
    del data  # the text replaces it; a 256 MiB list must not be held twice while it is parsed
    return read_pods_text(text, source, node, taken_at=taken_at)


_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _limit() -> str:
    return f"{MAX_POD_LIST_BYTES / 2**20:g} MiB"


def _check_size(size: int, source: str) -> None:
    if size > MAX_POD_LIST_BYTES:
        raise UsageError(f"{source}: is larger than {_limit()}, the limit for a pod list")


def _read_path(path: str, source: str) -> tuple[bytearray, float]:
    """The file's bytes and modification time. Checked before opening (a FIFO with no writer
    would block the open), opened non-blocking in case it was swapped since, and checked again
    once open, so what is read is what was checked."""
    _current_since(os.stat(path), source, pipes=False)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        return _read_opened(fd, source, pipes=False)
    finally:
        os.close(fd)


def _read_stdin() -> tuple[bytes | bytearray, float]:
    """stdin's bytes, and when they were current: a redirected file's modification time, as for
    `--pods FILE`; for a pipe the process start, since its writer (`kubectl get pods -o json |`)
    normally runs alongside this process.
    """
    stream = sys.stdin
    if stream is None:
        raise UsageError(
            "stdin is closed; pipe the pod list in or name a pod list file", Setting.POD_LIST
        )
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation: a stream in memory
        if stream.isatty():
            raise UsageError(_STDIN_TERMINAL, Setting.POD_LIST) from None
        return _read_stream(stream), hamimig.PROCESS_STARTED
    if os.isatty(fd):
        raise UsageError(_STDIN_TERMINAL, Setting.POD_LIST)
    return _read_opened(fd, "stdin", pipes=True)


def _read_opened(fd: int, source: str, pipes: bool) -> tuple[bytearray, float]:
    """A regular file's bytes and modification time or, with `pipes`, a pipe's (or a socket's)
    and the process start; anything else is refused unread. Read in chunks, so a growing file or
    an endless pipe is refused once past `MAX_POD_LIST_BYTES` rather than read to the end."""
    taken_at = _current_since(os.fstat(fd), source, pipes)
    data = bytearray()
    while True:
        try:
            chunk = os.read(fd, min(_CHUNK, MAX_POD_LIST_BYTES + 1 - len(data)))
        except BlockingIOError:  # a pipe left non-blocking by whoever set it up
            select.select([fd], [], [])
            continue
        if not chunk:
            return data, taken_at
        data += chunk
        _check_size(len(data), source)


def _current_since(info: os.stat_result, source: str, pipes: bool) -> float:
    """When what `info` describes was current: a regular file's modification time (refused over
    the limit) or, with `pipes`, the process start for a pipe or a socket; anything else is
    refused."""
    if stat.S_ISREG(info.st_mode):
        _check_size(info.st_size, source)
        return info.st_mtime
    if pipes and (stat.S_ISFIFO(info.st_mode) or stat.S_ISSOCK(info.st_mode)):
        return hamimig.PROCESS_STARTED
    kind = next((what for test, what in _FILE_KINDS if test(info.st_mode)), "not a regular file")
    wanted = "a pipe or a regular file" if pipes else "a regular file"
    raise UsageError(f"{source}: is {kind}, not {wanted}")


def _read_stream(stream: Any) -> bytes:
    """A stdin replaced by a stream in memory (an embedding program, a test runner)."""
    try:
        data = (getattr(stream, "buffer", None) or stream).read(MAX_POD_LIST_BYTES + 1)
        if isinstance(data, str):
            data = data.encode("utf-8")
    except UnicodeError:  # undecodable bytes, or lone surrogates from a text stream
        raise UsageError("stdin: pod list is not UTF-8") from None
    _check_size(len(data), "stdin")
    return bytes(data)


def _kube_configuration(kubernetes: Any) -> Any:
    """The client configuration, read afresh from the environment on every call: the client's
    default fixes KUBECONFIG when first imported. Never written back (`persist_config=False`):
    listing pods must not touch the operator's files."""
    cfg = kubernetes.client.Configuration()
    try:
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            kubernetes.config.load_incluster_config(client_configuration=cfg)
        else:
            config_file = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
            kubernetes.config.load_kube_config(
                config_file=config_file, client_configuration=cfg, persist_config=False
            )
    # The loaders raise ConfigException, but also OSError, YAML and key errors for a broken
    # kubeconfig; every one of them means the same thing to the operator.
    except Exception as exc:
        raise UsageError(
            _one_line(f"cannot load the Kubernetes configuration: {str(exc) or type(exc).__name__}")
        ) from None
    return cfg


def _is_timeout(exc: BaseException, urllib3: Any) -> bool:
    timeouts = (TimeoutError, urllib3.exceptions.TimeoutError)
    # urllib3 derives NewConnectionError (a refused connection) from ConnectTimeoutError.
    refused = urllib3.exceptions.NewConnectionError
    reason = getattr(exc, "reason", None)
    return any(isinstance(e, timeouts) and not isinstance(e, refused) for e in (exc, reason))


class _Listing:
    """The requests of one `--kube` listing, under one deadline and one byte budget. They go
    to the connection pool directly: the generated API methods read a whole error answer before
    the caller can bound it, and no answer may be read past the deadline or the budget, however
    the server sends it (endless, or one byte at a time within every socket timeout)."""

    def __init__(self, api_client: Any, urllib3: Any, source: str, timeout: float) -> None:
        self._client = api_client
        self._urllib3 = urllib3
        self._source = source
        self._timeout = timeout
        self._deadline = time.monotonic() + timeout
        self.budget = MAX_POD_LIST_BYTES
        # Retry connecting, never reading: a read retry would multiply the timeout the caller set.
        self._retries = urllib3.util.Retry(total=2, read=0, redirect=0, status=0)

    def _left(self) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise self._timed_out()
        return left

    def _timed_out(self) -> PodSourceError:
        return PodSourceError(
            f"{self._source}: the Kubernetes API did not answer within {self._timeout:g} s"
        )

    def _headers(self) -> dict[str, str]:
        headers = {**self._client.default_headers, "Accept": "application/json"}
        try:  # may run a kubeconfig exec plugin to refresh the token
            auth = self._client.configuration.auth_settings()
        except Exception as exc:
            text = f"cannot get credentials for the Kubernetes API: {exc}"
            raise _failed(self._source, text) from None
        for setting in auth.values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        return headers

    def get(self, path: str, query: dict[str, str]) -> tuple[int, str, bytes]:
        """Status, reason and body: a success's whole body, or the start of an error's."""
        config = self._client.configuration
        urllib3 = self._urllib3
        try:
            response = self._client.rest_client.pool_manager.request(
                "GET",
                config.host.rstrip("/") + path,
                fields=query,  # encoded into the URL, as urllib.parse.urlencode does
                headers=self._headers(),
                preload_content=False,
                timeout=urllib3.Timeout(total=self._left()),
                retries=self._retries,
            )
            finished = False
            try:
                status = int(response.status)
                success = 200 <= status < 300
                limit = self.budget if success else _ERROR_BODY_BYTES
                declared = response.headers.get("Content-Length") or ""
                if success and declared.isdigit() and int(declared) > limit:
                    raise self._too_big()
                body = self._read(response, limit)
                finished = len(body) <= limit
                if success:
                    if not finished:
                        raise self._too_big()
                    self.budget -= len(body)
                body = body[:limit]  # an error answer is quoted only in part
            finally:
                if not finished:  # unread bytes left: the connection cannot serve another request
                    response.close()
                response.release_conn()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if _is_timeout(exc, urllib3):
                raise self._timed_out() from None
            text = f"talking to the Kubernetes API at {config.host} failed: {exc}"
            raise _failed(self._source, text) from None
        return status, str(response.reason or ""), body

    def _read(self, response: Any, limit: int) -> bytes:
        """Up to `limit` bytes, or as soon as that is passed a little more, one socket read at a
        time so that the deadline is checked between reads and bounds each of them."""
        # The socket the body arrives on: the connection keeps it while it may be reused; when
        # the server said it will close, http.client hands it to the response's file object. If
        # neither is found, a read is bounded by the timeout the request began with: the deadline
        # is missed by one read.
        sock = getattr(getattr(response, "connection", None), "sock", None)
        if sock is None:
            raw = getattr(getattr(getattr(response, "_fp", None), "fp", None), "raw", None)
            sock = getattr(raw, "_sock", None)
        settimeout = getattr(sock, "settimeout", None)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            left = self._left()
            if settimeout is not None:
                with contextlib.suppress(OSError):  # closed once the whole body has arrived
                    settimeout(left)
            chunk = response.read1(_CHUNK)  # one socket read at most (urllib3 2.2 and later)
            if not chunk:
                break
            size += len(chunk)
            chunks.append(chunk)
        return b"".join(chunks)

    def _too_big(self) -> PodSourceError:
        return PodSourceError(
            f"{self._source}: the Kubernetes API sent more than the {_limit()} a listing may take"
        )


def _status_failure(source: str, status: int, reason: str, body: bytes) -> PodSourceError:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        doc = None
    detail = doc.get("message") if isinstance(doc, dict) else None
    text = f"{source}: the Kubernetes API answered {status} {reason}".rstrip()
    if isinstance(detail, str) and detail:
        text += f": {detail}"
    return PodSourceError(_one_line(text))


def _read_node(listing: _Listing, node: str, source: str) -> NodeIdentity:
    """The Node object's identity facts; a node the API does not know is a wrong --node."""
    status, reason, body = listing.get(f"/api/v1/nodes/{urllib.parse.quote(node, safe='')}", {})
    if status == 404:
        raise PodSourceError(
            f"{source}: node {node} does not exist in the cluster: the node name is wrong",
            Setting.NODE_NAME,
        )
    if status == 403:
        raise PodSourceError(
            f"{source}: the service account may not get nodes (add `get` on `nodes` to its "
            "ClusterRole: deploy/rbac.yaml)"
        )
    if not 200 <= status < 300:
        raise _status_failure(source, status, reason, body)
    try:
        return node_identity_from(json.loads(body), node)
    except (ValueError, RecursionError) as exc:  # RegistrationError, or not JSON at all
        raise _failed(source, f"the Kubernetes API sent an unusable Node object: {exc}") from None


def read_pods_kube(node: str, timeout: float = 30.0) -> PodSnapshot:
    """All pods on `node`, listed page by page, and what the API says about the node itself;
    `timeout` and `MAX_POD_LIST_BYTES` bound the whole listing, the Node object included."""
    if not node:
        raise UsageError(
            "listing pods through the Kubernetes API needs this node's name", Setting.NODE_NAME
        )
    try:
        import kubernetes.client
        import kubernetes.config
        import urllib3
    except ImportError:
        raise UsageError(KUBE_INSTALL_HINT) from None

    source = f"kube node {node}"
    cfg = _kube_configuration(kubernetes)
    with kubernetes.client.ApiClient(cfg) as api_client:
        listing = _Listing(api_client, urllib3, source, timeout)
        identity = _read_node(listing, node, source)
        taken_at = time.time()
        # The node's pods, then those bound to no node yet: HAMi's scheduler annotates a pod
        # before it binds it, so a pending pod may already claim one of this node's instances.
        # A server that ignores the selector sends those with the node's.
        found = list(_list_pages(listing, source, node, node))
        if not any(not pod.node_name for pod in found):
            found += [p for p in _list_pages(listing, source, "", node) if not p.node_name]
    try:
        return _snapshot(found, node, source, taken_at=taken_at, node_identity=identity)
    except _Malformed as exc:
        raise PodSourceError(f"{source}: {exc}") from None


def _list_pages(listing: _Listing, source: str, selected: str, node: str) -> Iterator[Pod]:
    """The pods whose `spec.nodeName` is `selected`, page by page, following continue tokens."""
    token: str | None = None
    while True:
        query = {"fieldSelector": f"spec.nodeName={selected}", "limit": str(KUBE_PAGE_SIZE)}
        if token is not None:
            query["continue"] = token
        status, reason, body = listing.get("/api/v1/pods", query)
        if not 200 <= status < 300:
            raise _status_failure(source, status, reason, body)
        try:
            with _gc_paused():
                pods, token = _pods_of(json.loads(body), node)
        except (ValueError, RecursionError) as exc:  # _Malformed, or not JSON at all
            raise _failed(source, f"the Kubernetes API sent an unusable pod list: {exc}") from None
        del body
        yield from pods
        if token is None:
            return
