"""The Kubernetes API pod source, against a loopback server that answers like the API server.

The official client runs unmodified: it reads a real kubeconfig (via KUBECONFIG) and talks HTTP to
127.0.0.1, so configuration loading, the field selector, pagination, error statuses and timeouts
are all exercised end to end.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from hamimig.errors import HamimigError, UsageError
from hamimig.pods import sources
from hamimig.pods.identity import NODE_REGISTER_ANNOTATION
from hamimig.pods.model import NodeIdentity
from hamimig.pods.sources import (
    KUBE_INSTALL_HINT,
    KUBE_PAGE_SIZE,
    PodSourceError,
    read_pods_kube,
)
from hamimig.vocabulary import Setting
from tests.support.kube import (
    ALL_PODS,
    GPU,
    GPU_B,
    NODE,
    NODE_PATH,
    PODS_PATH,
    SYSTEM_UUID,
    TOKEN,
    FakeApi,
    Stream,
    alloc_text,
    api_pod,
    node_doc,
    serving,
)


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApi]:
    with serving(FakeApi(), tmp_path, monkeypatch) as fake:
        yield fake


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

    (node_request, (path, query, auth), (_, pending, _)) = api.requests
    assert node_request == (NODE_PATH, {}, f"Bearer {TOKEN}")
    assert path == PODS_PATH
    assert query["fieldSelector"] == [f"spec.nodeName={NODE}"]
    assert query["limit"] == [str(KUBE_PAGE_SIZE)]
    assert "continue" not in query
    assert auth == f"Bearer {TOKEN}"
    # Then the pods bound to no node yet: HAMi's scheduler annotates before it binds.
    assert pending["fieldSelector"] == ["spec.nodeName="]
    assert snap.unbound == ()


def test_a_pending_pods_claim_is_listed_with_the_nodes(api: FakeApi) -> None:
    pending = api_pod("pending", "", annotation=alloc_text(4))
    del pending["spec"]["nodeName"]
    api.pods.append(pending)
    snap = read_pods_kube(NODE)
    assert [p.key for p in snap.unbound] == ["ml/pending"]
    assert snap.unbound[0].allocations[0].mig_uuid == "MIG-00000004-0000-5000-8000-000000000004"
    assert "ml/pending" not in [p.key for p in snap.pods + snap.elsewhere]


def test_follows_continue_tokens_to_the_last_page(api: FakeApi) -> None:
    api.page_size_override = 1
    snap = read_pods_kube(NODE)
    assert [p.key for p in snap.pods] == ["ml/a", "ml/b", "ml/c", "ml/bad"]
    *node_pages, pending = api.pod_requests()
    assert [q.get("continue") for q in node_pages] == [None, ["1"], ["2"], ["3"]]
    assert all(q["fieldSelector"] == [f"spec.nodeName={NODE}"] for q in node_pages)
    assert pending["fieldSelector"] == ["spec.nodeName="]


def test_two_pages(api: FakeApi) -> None:
    api.page_size_override = 2
    snap = read_pods_kube(NODE)
    assert len(snap.pods) == 4
    assert len(api.pod_requests()) == 3  # two pages of the node's pods, one of pending ones


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
    assert len(api.pod_requests()) == 1


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
    source_error("unusable pod list: expected kind PodList or List, got 'Status'")
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
    assert [auth for _, _, auth in api.requests] == ["Bearer in-cluster"] * 3


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
    with pytest.raises(UsageError, match="needs this node's name") as err:
        read_pods_kube("")
    assert err.value.setting is Setting.NODE_NAME


def test_client_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "kubernetes", None)
    with pytest.raises(UsageError) as info:
        read_pods_kube(NODE)
    assert info.value.message == KUBE_INSTALL_HINT
    assert (
        KUBE_INSTALL_HINT == "the Kubernetes client is not installed: pip install 'hamimig[kube]'"
    )


# --- answers that never end, trickle, or are too big -----------------------------------------


def headers(handler: BaseHTTPRequestHandler, status: int, length: int | None) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    if length is not None:
        handler.send_header("Content-Length", str(length))
    handler.end_headers()


def endless(status: int = 200) -> Stream:
    """A body with no length that never ends (HTTP/1.0: it would end when the server closes)."""

    def stream(handler: BaseHTTPRequestHandler, api: FakeApi) -> None:
        chunk = b'{"items": [' + b" " * 65525
        try:
            headers(handler, status, None)
            while not api.release.is_set():
                handler.wfile.write(chunk)
        except OSError:  # the client hung up, as it should
            pass

    return stream


def trickle(status: int = 200, stall_after: float | None = None) -> Stream:
    """One byte every 50 ms of a body that claims a megabyte: each read returns well within any
    socket timeout, so only a deadline over the whole answer ends it. With `stall_after`, the
    bytes stop after that many seconds and the connection then stays silent.
    """

    def stream(handler: BaseHTTPRequestHandler, api: FakeApi) -> None:
        began = time.monotonic()
        try:
            headers(handler, status, 1_000_000)
            # Give up after 10 s at most, so that a reader without a deadline fails, not hangs.
            while not api.release.is_set() and time.monotonic() - began < 10:
                if stall_after is not None and time.monotonic() - began > stall_after:
                    api.release.wait(10)
                    break
                handler.wfile.write(b" ")
                handler.wfile.flush()
                api.release.wait(0.05)
        except OSError:
            pass

    return stream


def test_endless_body_is_cut_at_the_size_limit(
    api: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources, "MAX_POD_LIST_BYTES", 4 << 20)
    api.stream = endless()
    start = time.monotonic()
    err = source_error(r"the Kubernetes API sent more than the 4 MiB a listing may take$")
    assert time.monotonic() - start < 5
    assert "\n" not in err.message


@pytest.mark.slow
def test_endless_body_at_the_real_limit(api: FakeApi) -> None:
    """256 MiB arrive and are refused: a PodSourceError, never a MemoryError."""
    api.stream = endless()
    source_error(r"sent more than the 256 MiB a listing may take$", timeout=60)


def test_trickling_body_is_cut_at_the_deadline(api: FakeApi) -> None:
    api.stream = trickle()
    start = time.monotonic()
    source_error(r"the Kubernetes API did not answer within 1 s$", timeout=1.0)
    assert time.monotonic() - start < 2.5


def test_stall_after_a_trickle_ends_at_the_deadline_not_a_socket_timeout_later(
    api: FakeApi,
) -> None:
    """Each socket read is bounded by the time left, not by the timeout the request began with:
    without that, a body that stops near the deadline would hold the listing a whole timeout more.
    """
    api.stream = trickle(stall_after=1.5)
    start = time.monotonic()
    source_error(r"did not answer within 2 s$", timeout=2.0)
    assert time.monotonic() - start < 3.0


def test_declared_length_over_the_limit_is_refused_unread(api: FakeApi) -> None:
    def stream(handler: BaseHTTPRequestHandler, api: FakeApi) -> None:
        try:
            headers(handler, 200, 300 << 20)
            handler.wfile.write(b"{")
            handler.wfile.flush()
            api.release.wait(10)
        except OSError:
            pass

    api.stream = stream
    start = time.monotonic()
    source_error(r"sent more than the 256 MiB a listing may take$")
    assert time.monotonic() - start < 2


def test_the_size_limit_covers_all_pages_together(
    api: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.page_size_override = 1
    largest = max(len(json.dumps({"items": [p]})) for p in ALL_PODS)
    monkeypatch.setattr(sources, "MAX_POD_LIST_BYTES", 2 * largest + 500)
    source_error(r"sent more than the .* MiB a listing may take$")
    assert len(api.pod_requests()) >= 2  # every page alone was small enough


@pytest.mark.parametrize("stream", [endless(500), trickle(500)], ids=["endless", "trickle"])
def test_error_answers_are_bounded_too(api: FakeApi, stream: Stream) -> None:
    """The API's error body is only quoted, so only its start is read, and within the deadline."""
    api.stream = stream
    start = time.monotonic()
    err = source_error(r"answered 500|did not answer within 1 s$", timeout=1.0)
    assert time.monotonic() - start < 2.5
    assert len(err.message) < 300


def test_node_object_is_bounded_like_the_list(api: FakeApi) -> None:
    api.node_stream = trickle()
    source_error(r"did not answer within 1 s$", timeout=1.0)
    assert api.pod_requests() == []


# --- the Node object -------------------------------------------------------------------------


def test_node_identity_from_the_node_object(api: FakeApi) -> None:
    snap = read_pods_kube(NODE)
    assert snap.node_identity == NodeIdentity(NODE, frozenset({GPU, GPU_B}), SYSTEM_UUID)
    assert snap.elsewhere == ()
    assert [path for path, _, _ in api.requests] == [NODE_PATH, PODS_PATH, PODS_PATH]


def test_snapshot_time_is_just_before_the_first_page(api: FakeApi) -> None:
    api.page_size_override = 2
    before = time.time()
    snap = read_pods_kube(NODE)
    node_asked, first_page, second_page, _pending = api.times
    assert before <= node_asked <= snap.taken_at <= first_page <= second_page


def test_older_registration_form(api: FakeApi) -> None:
    api.node = node_doc(
        register=f"{GPU},10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
        f"{GPU_B},10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
    )
    identity = read_pods_kube(NODE).node_identity
    assert identity is not None
    assert identity.registered_gpus == frozenset({GPU, GPU_B})


def test_node_without_registration_or_system_uuid(api: FakeApi) -> None:
    api.node = node_doc(system_uuid=None)
    del api.node["metadata"]["annotations"][NODE_REGISTER_ANNOTATION]
    assert read_pods_kube(NODE).node_identity == NodeIdentity(NODE, None, None)


@pytest.mark.parametrize(
    ("register", "problem"),
    [
        ("[{", "neither valid JSON nor id,count"),
        ('[{"count": 10}]', "entry 0 has no usable id"),
        ('{"id": "GPU-1"}', "entry 0 is not id,count"),
        ("garbage", "entry 0 is not id,count"),
    ],
)
def test_unreadable_registration_names_the_annotation(
    api: FakeApi, register: str, problem: str
) -> None:
    api.node = node_doc(register=register)
    err = source_error(f"unusable Node object: annotation {NODE_REGISTER_ANNOTATION} ")
    assert problem in err.message
    assert api.pod_requests() == []


def test_node_that_does_not_exist(api: FakeApi) -> None:
    api.node_status = 404
    err = source_error("does not exist")
    assert err.message == (
        f"kube node {NODE}: node {NODE} does not exist in the cluster: the node name is wrong"
    )
    assert err.setting is Setting.NODE_NAME
    assert api.pod_requests() == []


def test_node_forbidden_names_the_rbac_rule(api: FakeApi) -> None:
    api.node_status = 403
    err = source_error("may not get nodes")
    assert err.message == (
        f"kube node {NODE}: the service account may not get nodes (add `get` on `nodes` to its "
        "ClusterRole: deploy/rbac.yaml)"
    )


def test_node_other_failures(api: FakeApi) -> None:
    api.node_status = 500
    source_error("answered 500 .*etcdserver: request timed out")
    api.node_status = None
    api.node = {"kind": "Node", "metadata": {"name": "gpu-node-9"}}
    source_error("unusable Node object: is named gpu-node-9, not gpu-node-1")
    api.node = ["not", "a", "node"]
    source_error("unusable Node object: is not a Node object")
    api.node = {"kind": "Node", "metadata": {"name": NODE}, "status": {"nodeInfo": []}}
    source_error("unusable Node object: status.nodeInfo is not an object")


def test_pods_a_server_returns_for_other_nodes_are_kept_apart(api: FakeApi) -> None:
    """A server that ignores the field selector: the other node's holding pod is `elsewhere`."""
    api.body = json.dumps({"kind": "PodList", "items": ALL_PODS}).encode()
    snap = read_pods_kube(NODE)
    assert [p.key for p in snap.pods] == ["ml/a", "ml/b", "ml/c", "ml/bad"]
    assert [p.key for p in snap.elsewhere] == ["ml/elsewhere"]
