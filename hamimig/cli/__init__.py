"""The command line: parse, call the engine, render. Nothing else lives here."""
