"""The lifecycle: value types, planning, execution, queries. The CLI's only way down."""
