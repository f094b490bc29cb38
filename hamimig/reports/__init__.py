"""Operator reports above the lifecycle core: what operators read about the node (`list`,
`show`, `profiles`, `doctor`, `metrics`, `events`, `config show`) and the values shell
completion offers. They ask the core (hamimig/engine) and the stores; the core never asks them
(docs/design.md "Layers")."""
