"""The binder's cache: the world it decides from, fed by watch events, and its indexes.

`World` holds every watched object and the indexes derived from them (devices by node
and phase, free sets, node resources, the orders); it imports nothing of `binder/` or
`webhook/`, which both read it.
"""
