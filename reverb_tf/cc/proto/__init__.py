"""The wire format's Python modules (generated: see BUILD)."""
