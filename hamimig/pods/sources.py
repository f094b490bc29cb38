"""Where the pod list comes from: a kubectl dump (file or stdin) or the Kubernetes API.

Both sources funnel into one reader of the raw `PodList` document, so a pod means the same thing
whichever way it arrived. The reader touches only the handful of fields that decide whether a pod
holds MIG instances; building the client's model objects (or walking managedFields) for 10,000
pods would cost seconds at node start, which is exactly when recovery runs.

Failures split by who can fix them: a file that is not a pod list is the operator's mistake
(`UsageError`, exit 2); an API server that cannot be asked, or answers nonsense, leaves the pod
state unverifiable (`PodSourceError`, exit 5), and recovery must then change nothing. No list is
ever silently partial (a missing pod would look like a released instance): the API source follows
every page or fails, and a file that holds one page of a paginated list is marked incomplete.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hamimig.errors import UnverifiableError, UsageError
from hamimig.pods.annotation import ANNOTATION, AnnotationError, MigAllocation, decode_allocations
from hamimig.pods.model import Pod

KUBE_PAGE_SIZE = 500
"""Pods per API request: large enough for few round trips, small enough for the server's limits."""

KUBE_INSTALL_HINT = "the Kubernetes client is not installed: pip install 'hamimig[kube]'"

_FIRST_NON_SPACE = re.compile(r"\S")


class PodSourceError(UnverifiableError):
    """The pod list could not be obtained or trusted, so no pod state can be verified.

    Exit 5 rather than a usage error: the command was right, but acting on an unknown pod list
    could destroy an instance that a running pod uses.
    """

    exit_code = 5
    code = "unverifiable"


@dataclass(frozen=True)
class PodSnapshot:
    """Every pod the source reported, and where they came from (for messages and plans).

    `complete` is False when the source is known to hold only part of the list: a file that is
    one page of a paginated API list (its `metadata.continue` is set). The API source follows
    every page or raises, so its snapshots are always complete.
    """

    pods: tuple[Pod, ...]
    source: str
    complete: bool = True


class _Malformed(ValueError):
    """The document is not a pod list; the caller decides whose fault that is."""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _at(where: str, text: str) -> str:
    return f"{where}: {text}" if where else text


def _dict_field(obj: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Malformed(f"{where}: {key} is not an object")
    return value


def _opt_str(value: Any, where: str, field: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    # An unquoted timestamp in hand-written YAML arrives as a datetime; kubectl quotes them.
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    raise _Malformed(f"{where}: {field} is not a string")


def _pod(item: Any, where: str, node: str | None) -> Pod | None:
    """One pod from its manifest, or None when it runs on another node."""
    if not isinstance(item, dict):
        raise _Malformed(f"{where} is not an object")
    kind = item.get("kind")
    # Items of an API PodList carry no kind; kubectl adds "Pod". Anything else is not a pod.
    if kind is not None and kind != "Pod":
        raise _Malformed(f"{where} has kind {kind!r}, not Pod")
    meta = _dict_field(item, "metadata", where or "pod")
    name = meta.get("name")
    namespace = meta.get("namespace")
    if not isinstance(name, str) or not name:
        raise _Malformed(_at(where, "pod has no metadata.name"))
    if not isinstance(namespace, str) or not namespace:
        raise _Malformed(_at(where, f"pod {name} has no metadata.namespace"))
    where = f"{where} ({namespace}/{name})" if where else f"pod {namespace}/{name}"
    spec = _dict_field(item, "spec", where)
    node_name = _opt_str(spec.get("nodeName"), where, "spec.nodeName")
    # Validate before filtering so that a broken pod elsewhere in the list is not silently skipped.
    uid = _opt_str(meta.get("uid"), where, "metadata.uid")
    deletion = _opt_str(meta.get("deletionTimestamp"), where, "metadata.deletionTimestamp")
    phase = _opt_str(_dict_field(item, "status", where).get("phase"), where, "status.phase")
    annotations = _dict_field(meta, "annotations", where)
    if node is not None and node_name != node:
        return None

    allocations: tuple[MigAllocation, ...] = ()
    error: str | None = None
    raw = annotations.get(ANNOTATION)
    if raw is None:
        pass
    elif not isinstance(raw, str):
        error = "annotation value is not a string"
    elif raw.strip():
        # An empty value carries no claim at all; only a claim that cannot be read is an error.
        try:
            allocations = decode_allocations(raw)
        except AnnotationError as exc:
            error = str(exc)
    return Pod(
        namespace=namespace,
        name=name,
        uid=uid,
        node_name=node_name,
        phase=phase,
        deletion_timestamp=deletion,
        allocations=allocations,
        annotation_error=error,
    )


def _pods_of(doc: Any, node: str | None) -> tuple[list[Pod], str | None]:
    """The pods of one `PodList`/`List`/`Pod` document, and the list's continue token.

    A token means the document is one page of a longer list: the API source fetches the next
    page, and a file holding one page is reported as incomplete.
    """
    if not isinstance(doc, dict):
        got = "an array" if isinstance(doc, list) else type(doc).__name__
        raise _Malformed(f"expected a PodList, List or Pod object, got {got}")
    kind = doc.get("kind")
    if kind == "Pod":
        items: Any = [doc]
        single = True
    elif kind in ("PodList", "List") or (kind is None and "items" in doc):
        items = doc.get("items")
        single = False
        if items is None:  # Go marshals an empty slice it never allocated as null
            items = []
        if not isinstance(items, list):
            raise _Malformed("items is not a list")
    else:
        raise _Malformed(f"expected kind PodList, List or Pod, got {kind!r}")
    pods: list[Pod] = []
    for i, item in enumerate(items):
        pod = _pod(item, "" if single else f"item {i}", node)
        if pod is not None:
            pods.append(pod)
    token = _dict_field(doc, "metadata", "list").get("continue")
    if token is not None and not isinstance(token, str):
        raise _Malformed("metadata.continue is not a string")
    return pods, token or None


def _check_unique(pods: list[Pod]) -> None:
    # Two entries for one pod could disagree about its allocations; neither can be believed.
    seen: set[str] = set()
    for pod in pods:
        if pod.key in seen:
            raise _Malformed(f"pod {pod.key} appears more than once")
        seen.add(pod.key)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Parsing a pod list allocates millions of containers, none of them in a reference cycle.

    With the cyclic collector running, those allocations trigger collections that walk every live
    object (the document being built included) and find no garbage: that alone costs about as
    much as the parse. Callers keep it paused until the document has been reduced to `Pod`s and
    dropped, because the document's objects would otherwise be walked once the collector resumes.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
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
    """JSON when it looks like JSON (fast), YAML otherwise.

    Text that starts like JSON is never retried as YAML: kubectl's YAML never starts with `{` or
    `[`, and re-parsing a truncated 10 MB JSON dump as YAML would take seconds only to report a
    less useful error.
    """
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

    # libyaml's loader is several times faster than the pure-Python one (FACTS.md section 4).
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        raise _Malformed(f"is not valid YAML: {_yaml_problem(exc)}") from None
    except ValueError as exc:  # a scalar that resolves to a type it cannot become (2024-02-30)
        raise _Malformed(f"is not valid YAML: {exc}") from None
    except RecursionError:
        raise _Malformed("is not valid YAML: nested too deeply") from None


def read_pods_text(text: str, source: str, node: str | None) -> PodSnapshot:
    """Pods from `kubectl get pods -o json|yaml` output; without `node`, every pod counts."""
    try:
        with _gc_paused():
            pods, token = _pods_of(_load_document(text), node)
        _check_unique(pods)
    except _Malformed as exc:
        raise UsageError(_one_line(f"{source}: {exc}")) from None
    # A saved page of a paginated list (`kubectl get --raw '...?limit=N'`): the pods it leaves
    # out may hold instances, so the engine must not act on it.
    return PodSnapshot(pods=tuple(pods), source=source, complete=token is None)


def read_pods_file(path: str, node: str | None) -> PodSnapshot:
    """`-` is stdin, so `kubectl get pods -o json | hamimig recover --pods -` works."""
    if path == "-":
        source = "stdin"
        try:
            text = sys.stdin.read()
        except UnicodeDecodeError:
            raise UsageError("stdin: pod list is not UTF-8") from None
        except OSError as exc:
            raise UsageError(_one_line(f"stdin: cannot read: {exc.strerror or exc}")) from None
    else:
        source = f"file {path}"
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except UnicodeDecodeError:
            raise UsageError(f"{source}: pod list is not UTF-8") from None
        except OSError as exc:
            raise UsageError(_one_line(f"{source}: cannot read: {exc.strerror or exc}")) from None
    return read_pods_text(text, source, node)


def _kube_configuration(kubernetes: Any) -> Any:
    """The client configuration, read afresh from the environment on every call.

    KUBECONFIG is read here rather than through the client's default, which the client fixes
    when it is first imported. The kubeconfig is never written back (`persist_config=False`):
    listing pods must not touch the operator's files.
    """
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


def _api_failure(exc: Any, source: str) -> PodSourceError:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None) or ""
    if not status:  # the client's own wrapper for TLS failures
        return PodSourceError(_one_line(f"{source}: cannot reach the Kubernetes API: {reason}"))
    detail = ""
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        body = None
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        detail = body["message"]
    text = f"{source}: the Kubernetes API answered {status} {reason}".rstrip()
    if detail:
        text += f": {detail}"
    return PodSourceError(_one_line(text))


def _is_timeout(exc: BaseException, urllib3: Any) -> bool:
    timeouts = (TimeoutError, urllib3.exceptions.TimeoutError)
    # urllib3 derives NewConnectionError (a refused connection) from ConnectTimeoutError.
    refused = urllib3.exceptions.NewConnectionError
    reason = getattr(exc, "reason", None)
    return any(isinstance(e, timeouts) and not isinstance(e, refused) for e in (exc, reason))


def read_pods_kube(node: str, timeout: float = 30.0) -> PodSnapshot:
    """All pods on `node`, listed page by page; `timeout` bounds the whole listing."""
    if not node:
        raise UsageError("listing pods through the Kubernetes API needs --node")
    try:
        import kubernetes.client
        import kubernetes.config
        import urllib3
    except ImportError:
        raise UsageError(KUBE_INSTALL_HINT) from None

    source = f"kube node {node}"
    cfg = _kube_configuration(kubernetes)
    # Retry connecting, never reading: a read retry would multiply the timeout the caller set.
    cfg.retries = urllib3.util.Retry(total=2, read=0, redirect=0, status=0)
    deadline = time.monotonic() + timeout
    pods: list[Pod] = []
    token: str | None = None
    with kubernetes.client.ApiClient(cfg) as api_client:
        api = kubernetes.client.CoreV1Api(api_client)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PodSourceError(f"{source}: listing pods timed out after {timeout:g} s")
            try:
                response = api.list_pod_for_all_namespaces(
                    field_selector=f"spec.nodeName={node}",
                    limit=KUBE_PAGE_SIZE,
                    _continue=token,
                    _preload_content=False,
                    _request_timeout=remaining,
                )
                try:
                    body = response.data
                finally:
                    response.release_conn()
            except kubernetes.client.exceptions.ApiException as exc:
                raise _api_failure(exc, source) from None
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                if _is_timeout(exc, urllib3):
                    raise PodSourceError(
                        f"{source}: the Kubernetes API did not answer within {timeout:g} s"
                    ) from None
                raise PodSourceError(
                    _one_line(
                        f"{source}: talking to the Kubernetes API at {cfg.host} failed: {exc}"
                    )
                ) from None
            try:
                with _gc_paused():
                    page, token = _pods_of(json.loads(body), node)
            except (ValueError, RecursionError) as exc:  # _Malformed, or not JSON at all
                raise PodSourceError(
                    _one_line(f"{source}: the Kubernetes API sent an unusable pod list: {exc}")
                ) from None
            pods.extend(page)
            if token is None:
                break
    try:
        _check_unique(pods)
    except _Malformed as exc:
        raise PodSourceError(f"{source}: {exc}") from None
    return PodSnapshot(pods=tuple(pods), source=source)
