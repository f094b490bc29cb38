"""Helpers the test modules share, one small module a subject, so that a test module imports what
it needs from here instead of from another test module (tests/test_suite_layout.py checks that):

- `cli`: running `hamimig` in-process or in a child process, and reading its answers;
- `node`: the simulated node as tests read it (its state file, the NVML adapter over it);
- `nvml`: which simulated NVML functions change the node, and NVML call counts;
- `files`: snapshots of directory trees, to assert that a command left them unchanged;
- `unchanged`: "nothing changed" (both directories, the layout, no mutating NVML call);
- `records`: the state directory's records and intents, by their documented names;
- `cdi`: CDI spec paths, the node's NVIDIA spec and the reference CDI library's check tool;
- `pods`: pod lists as `kubectl get pods -o json` prints them;
- `kube`: a loopback server answering like the Kubernetes API server;
- `crash`: reading a node after a crash, and the invariants every crash point keeps;
- `crash_scenarios`: the allocate and reclaim scenarios the crash suites interrupt;
- `processes`: a Python snippet in a fresh interpreter at the repository root.

Fixtures stay in tests/conftest.py; golden-file helpers in tests/golden.py.
"""
