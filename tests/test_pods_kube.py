"""The Kubernetes API pod source, against a loopback server that answers like the API server.

The official client runs unmodified: it reads a real kubeconfig (via KUBECONFIG) and talks HTTP to
127.0.0.1, so configuration loading, the field selector, pagination, error statuses and timeouts
are all exercised end to end.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from hamimig.errors import HamimigError, UsageError
from hamimig.hw.types import Placement
from hamimig.pods.annotation import ANNOTATION, MigAllocation, encode_allocations
from hamimig.pods.sources import (
    KUBE_INSTALL_HINT,
    KUBE_PAGE_SIZE,
    PodSourceError,
    read_pods_kube,
)

NODE = "gpu-node-1"
TOKEN = "test-token-7f3a"
GPU = "GPU-5f0c3b8e-2a1d-4c9e-8b7a-0d1e2f3a4b5c"


def api_pod(name: str, node: str, phase: str = "Running", annotation: str | None = None) -> Any:
    """An item of an API PodList: unlike kubectl's output it has no kind or apiVersion."""
    annotations = {"hami.io/vgpu-node": node, "hami.io/bind-phase": "success"}
    if annotation is not None:
        annotations[ANNOTATION] = annotation
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "resourceVersion": "4471823",
            "creationTimestamp": "2024-05-02T08:11:09Z",
            "annotations": annotations,
            "managedFields": [
                {
                    "manager": "kubelet",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2024-05-02T08:11:31Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:phase": {}}},
                    "subresource": "status",
                }
            ],
        },
        "spec": {
            "containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3"}],
            "nodeName": node,
            "schedulerName": "hami-scheduler",
        },
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0}],
        },
    }


def alloc_text(n: int) -> str:
    mig = f"MIG-{n:08x}-0000-5000-8000-{n:012x}"
    return encode_allocations([MigAllocation(0, 0, GPU, "1g.10gb", Placement(n, 1), mig, n, 0)])


ALL_PODS = [
    api_pod("a", NODE, annotation=alloc_text(1)),
    api_pod("b", NODE, phase="Succeeded", annotation=alloc_text(2)),
    api_pod("elsewhere", "gpu-node-2", annotation=alloc_text(3)),
    api_pod("c", NODE),
    api_pod("bad", NODE, annotation='[{"containerIndex":0}]'),
]


@dataclass
class FakeApi:
    """What the server should answer, and what it was asked."""

    url: str = ""
    page_size_override: int | None = None
    status: int | None = None
    status_on_continue: int | None = None
    delay: float = 0.0
    body: bytes | None = None
    cut_body: bool = False
    requests: list[tuple[str, dict[str, list[str]], str | None]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


def status_body(code: int) -> bytes:
    reasons = {403: "Forbidden", 410: "Expired", 500: "InternalError"}
    messages = {
        403: 'pods is forbidden: User "system:serviceaccount:kube-system:hamimig" cannot list '
        'resource "pods" in API group "" at the cluster scope',
        410: "The provided continue parameter is too old to display a consistent list result.",
        500: "etcdserver: request timed out",
    }
    doc = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": messages[code],
        "reason": reasons[code],
        "code": code,
    }
    return json.dumps(doc).encode()


def make_handler(api: FakeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def send(self, code: int, body: bytes) -> None:
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:  # the client gave up (the timeout test)
                pass

        def send_part(self) -> None:
            """Headers and half a body, then wait (a stall) or hang up (a truncated answer)."""
            body = json.dumps({"kind": "PodList", "items": ALL_PODS}).encode()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                if api.delay:
                    api.release.wait(api.delay)
            except OSError:
                pass

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            query = urllib.parse.parse_qs(url.query)
            api.requests.append((url.path, query, self.headers.get("Authorization")))
            if api.cut_body:
                return self.send_part()
            if api.delay:
                api.release.wait(api.delay)
            if api.body is not None:
                return self.send(200, api.body)
            if api.status is not None:
                return self.send(api.status, status_body(api.status))
            if url.path != "/api/v1/pods":
                return self.send(404, b"{}")
            if "continue" in query and api.status_on_continue is not None:
                return self.send(api.status_on_continue, status_body(api.status_on_continue))
            # Honour the field selector and paginate as the API server does.
            items = ALL_PODS
            for selector in query.get("fieldSelector", []):
                key, _, value = selector.partition("=")
                assert key == "spec.nodeName"
                items = [p for p in items if p["spec"]["nodeName"] == value]
            limit = api.page_size_override or int(query.get("limit", ["0"])[0]) or len(items)
            start = int(query.get("continue", ["0"])[0])
            page = items[start : start + limit]
            meta: dict[str, Any] = {"resourceVersion": "4471900"}
            if start + limit < len(items):
                meta["continue"] = str(start + limit)
                meta["remainingItemCount"] = len(items) - start - limit
            doc = {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": page}
            return self.send(200, json.dumps(doc).encode())

    return Handler


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApi]:
    fake = FakeApi()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(fake))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: {fake.url}
users:
- name: test
  user:
    token: {TOKEN}
contexts:
- name: test
  context:
    cluster: test
    user: test
current-context: test
""",
        encoding="utf-8",
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    try:
        yield fake
    finally:
        fake.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def source_error(match: str, timeout: float = 5.0) -> PodSourceError:
    with pytest.raises(PodSourceError, match=match) as info:
        read_pods_kube(NODE, timeout=timeout)
    err = info.value
    assert isinstance(err, HamimigError)
    assert (err.exit_code, err.code) == (5, "unverifiable")
    assert err.message.startswith(f"kube node {NODE}: ")
    assert "\n" not in err.message
    return err


def test_lists_pods_of_the_node_with_the_field_selector(api: FakeApi) -> None:
    snap = read_pods_kube(NODE)
    assert snap.source == f"kube node {NODE}"
    assert snap.complete
    assert [p.key for p in snap.pods] == ["ml/a", "ml/b", "ml/c", "ml/bad"]
    pods = {p.name: p for p in snap.pods}
    assert pods["a"].allocations[0].mig_uuid == "MIG-00000001-0000-5000-8000-000000000001"
    assert pods["a"].holds_allocations
    assert not pods["b"].holds_allocations
    assert pods["c"].allocations == ()
    assert (pods["bad"].annotation_error or "").startswith("entry 0: deviceIndex")
    assert pods["a"].uid == "uid-a"
    assert pods["a"].node_name == NODE

    ((path, query, auth),) = api.requests
    assert path == "/api/v1/pods"
    assert query["fieldSelector"] == [f"spec.nodeName={NODE}"]
    assert query["limit"] == [str(KUBE_PAGE_SIZE)]
    assert "continue" not in query
    assert auth == f"Bearer {TOKEN}"


def test_follows_continue_tokens_to_the_last_page(api: FakeApi) -> None:
    api.page_size_override = 1
    snap = read_pods_kube(NODE)
    assert [p.key for p in snap.pods] == ["ml/a", "ml/b", "ml/c", "ml/bad"]
    assert [q.get("continue") for _, q, _ in api.requests] == [None, ["1"], ["2"], ["3"]]
    assert all(q["fieldSelector"] == [f"spec.nodeName={NODE}"] for _, q, _ in api.requests)


def test_two_pages(api: FakeApi) -> None:
    api.page_size_override = 2
    snap = read_pods_kube(NODE)
    assert len(snap.pods) == 4
    assert len(api.requests) == 2


@pytest.mark.parametrize("code", [403, 500])
def test_error_status(api: FakeApi, code: int) -> None:
    api.status = code
    err = source_error(f"the Kubernetes API answered {code} ")
    expected = {403: "pods is forbidden: User", 500: "etcdserver: request timed out"}
    assert expected[code] in err.message


def test_expired_continue_token_fails_the_whole_list(api: FakeApi) -> None:
    api.page_size_override = 2
    api.status_on_continue = 410
    source_error("answered 410 .*continue parameter is too old")


def test_timeout(api: FakeApi) -> None:
    api.delay = 5.0
    start = time.monotonic()
    source_error(r"the Kubernetes API did not answer within 0\.5 s$", timeout=0.5)
    elapsed = time.monotonic() - start
    assert elapsed < 2.5  # one attempt: a read is never retried past the caller's timeout
    assert len(api.requests) == 1


def test_body_stalls_after_the_headers(api: FakeApi) -> None:
    api.cut_body, api.delay = True, 5.0
    start = time.monotonic()
    source_error(r"did not answer within 0\.5 s$", timeout=0.5)
    assert time.monotonic() - start < 2.5


def test_truncated_body(api: FakeApi) -> None:
    api.cut_body = True
    source_error("talking to the Kubernetes API at http://127.0.0.1:.* failed: .*IncompleteRead")


def test_unusable_body(api: FakeApi) -> None:
    api.body = b"<html>proxy error</html>"
    source_error("the Kubernetes API sent an unusable pod list")
    api.body = b'{"kind": "Status"}'
    source_error("unusable pod list: expected kind PodList, List or Pod, got 'Status'")
    api.body = json.dumps({"kind": "PodList", "items": [ALL_PODS[0], ALL_PODS[0]]}).encode()
    source_error("pod ml/a appears more than once")


def test_unreachable_server(api: FakeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = Path(str(tmp_path / "kubeconfig")).read_text(encoding="utf-8")
    dead = tmp_path / "dead-kubeconfig"
    dead.write_text(config.replace(api.url, f"http://127.0.0.1:{port}"), encoding="utf-8")
    monkeypatch.setenv("KUBECONFIG", str(dead))
    err = source_error("talking to the Kubernetes API at http://127.0.0.1:.* failed")
    assert "refused" in err.message.lower()


def test_in_cluster_config_when_service_host_is_set(
    api: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kubernetes.config

    used: list[str] = []

    def fake_incluster(client_configuration: Any = None, **_: Any) -> None:
        used.append("incluster")
        client_configuration.host = api.url
        client_configuration.api_key = {"authorization": "Bearer in-cluster"}

    def no_kubeconfig(*_: Any, **__: Any) -> None:
        raise AssertionError("KUBECONFIG must not be read in a pod")

    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setattr(kubernetes.config, "load_incluster_config", fake_incluster)
    monkeypatch.setattr(kubernetes.config, "load_kube_config", no_kubeconfig)
    assert len(read_pods_kube(NODE).pods) == 4
    assert used == ["incluster"]
    assert api.requests[0][2] == "Bearer in-cluster"


def test_in_cluster_without_service_account(monkeypatch: pytest.MonkeyPatch) -> None:
    import kubernetes.config

    def failing(*_: Any, **__: Any) -> None:
        raise kubernetes.config.ConfigException("Service token file does not exist.")

    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setattr(kubernetes.config, "load_incluster_config", failing)
    with pytest.raises(
        UsageError, match=r"^cannot load the Kubernetes configuration: Service token"
    ):
        read_pods_kube(NODE)


def test_missing_or_broken_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    with pytest.raises(UsageError, match=r"^cannot load the Kubernetes configuration") as info:
        read_pods_kube(NODE)
    assert info.value.exit_code == 2
    broken = tmp_path / "broken"
    broken.write_text("clusters: [\n", encoding="utf-8")
    monkeypatch.setenv("KUBECONFIG", str(broken))
    with pytest.raises(UsageError, match=r"^cannot load the Kubernetes configuration") as info:
        read_pods_kube(NODE)
    assert "\n" not in info.value.message


def test_needs_a_node() -> None:
    with pytest.raises(UsageError, match="needs --node"):
        read_pods_kube("")


def test_client_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "kubernetes", None)
    with pytest.raises(UsageError) as info:
        read_pods_kube(NODE)
    assert info.value.message == KUBE_INSTALL_HINT
    assert (
        KUBE_INSTALL_HINT == "the Kubernetes client is not installed: pip install 'hamimig[kube]'"
    )
