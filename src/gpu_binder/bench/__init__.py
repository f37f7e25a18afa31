"""Benchmarks that print figures: the binder's pass, and (with a control plane) the webhook."""
