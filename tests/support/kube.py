"""A loopback HTTP server that answers like the Kubernetes API server (the pod list with its
field selector, pagination and error statuses; the Node object with HAMi's device registration),
so that the official client runs unmodified against it: `serving` writes a kubeconfig pointing at
it and clears what would send the client elsewhere (in-cluster variables, proxies)."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from hamimig.hw.types import Placement
from hamimig.pods.annotation import ANNOTATION, MigAllocation, encode_allocations
from hamimig.pods.identity import NODE_REGISTER_ANNOTATION

NODE = "gpu-node-1"
TOKEN = "test-token-7f3a"
GPU = "GPU-5f0c3b8e-2a1d-4c9e-8b7a-0d1e2f3a4b5c"
GPU_B = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
SYSTEM_UUID = "4C4C4544-0042-3510-8052-B3C04F4E3332"
PODS_PATH = "/api/v1/pods"
NODE_PATH = f"/api/v1/nodes/{NODE}"


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


def node_doc(register: str | None = None, system_uuid: str | None = SYSTEM_UUID) -> Any:
    """A Node as `GET /api/v1/nodes/NAME` returns it, with HAMi's device registration."""
    if register is None:
        devices = [
            {"id": gpu, "count": 10, "devmem": 81920, "type": "NVIDIA-H100", "health": True}
            for gpu in (GPU, GPU_B)
        ]
        register = json.dumps(devices)
    info = {"kubeletVersion": "v1.30.2", "machineID": "d4c8f6f0a8b94e0c"}
    if system_uuid is not None:
        info["systemUUID"] = system_uuid
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": NODE,
            "annotations": {
                "hami.io/node-handshake": "Reported 2024-05-02 08:11:09",
                NODE_REGISTER_ANNOTATION: register,
            },
        },
        "status": {"nodeInfo": info},
    }


Stream = Callable[[BaseHTTPRequestHandler, "FakeApi"], None]


@dataclass
class FakeApi:
    """What the server should answer, and what it was asked.

    The answer knobs (`status`, `delay`, `body`, `cut_body`, `stream`) apply to the pod list;
    the Node object has its own (`node`, `node_status`, `node_stream`).
    """

    url: str = ""
    page_size_override: int | None = None
    status: int | None = None
    status_on_continue: int | None = None
    delay: float = 0.0
    body: bytes | None = None
    cut_body: bool = False
    stream: Stream | None = None
    node: Any = field(default_factory=node_doc)
    node_status: int | None = None
    node_stream: Stream | None = None
    pods: list[Any] = field(default_factory=lambda: list(ALL_PODS))
    """The cluster's pods, which the field selector picks from."""
    requests: list[tuple[str, dict[str, list[str]], str | None]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def pod_requests(self) -> list[dict[str, list[str]]]:
        return [query for path, query, _ in self.requests if path == PODS_PATH]


def status_body(code: int) -> bytes:
    reasons = {403: "Forbidden", 404: "NotFound", 410: "Expired", 500: "InternalError"}
    messages = {
        403: 'pods is forbidden: User "system:serviceaccount:kube-system:hamimig" cannot list '
        'resource "pods" in API group "" at the cluster scope',
        404: f'nodes "{NODE}" not found',
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
            api.times.append(time.time())
            if url.path.startswith("/api/v1/nodes/"):
                return self.node(url.path)
            if url.path != PODS_PATH:
                return self.send(404, b"{}")
            if api.stream is not None:
                return api.stream(self, api)
            if api.cut_body:
                return self.send_part()
            if api.delay:
                api.release.wait(api.delay)
            if api.body is not None:
                return self.send(200, api.body)
            if api.status is not None:
                return self.send(api.status, status_body(api.status))
            if "continue" in query and api.status_on_continue is not None:
                return self.send(api.status_on_continue, status_body(api.status_on_continue))
            # Honour the field selector and paginate as the API server does.
            items = api.pods
            for selector in query.get("fieldSelector", []):
                key, _, value = selector.partition("=")
                assert key == "spec.nodeName"
                items = [p for p in items if p["spec"].get("nodeName", "") == value]
            limit = api.page_size_override or int(query.get("limit", ["0"])[0]) or len(items)
            start = int(query.get("continue", ["0"])[0])
            page = items[start : start + limit]
            meta: dict[str, Any] = {"resourceVersion": "4471900"}
            if start + limit < len(items):
                meta["continue"] = str(start + limit)
                meta["remainingItemCount"] = len(items) - start - limit
            doc = {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": page}
            return self.send(200, json.dumps(doc).encode())

        def node(self, path: str) -> None:
            if api.node_stream is not None:
                return api.node_stream(self, api)
            if api.node_status is not None:
                return self.send(api.node_status, status_body(api.node_status))
            if path != NODE_PATH:
                return self.send(404, status_body(404))
            return self.send(200, json.dumps(api.node).encode())

    return Handler


@contextmanager
def serving(fake: FakeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApi]:
    """Serve `fake` on 127.0.0.1 while the block runs, with KUBECONFIG naming it (token TOKEN)."""
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
