"""Operator reports and tools above the lifecycle core: what operators read about the node
(`list`, `show`, `profiles`, `doctor`, `metrics`, `config show`), the narrated `demo`, and the
simulator's admin commands. They ask the core (hamimig/engine) and the stores; the core never
asks them (docs/design.md "Layers")."""
