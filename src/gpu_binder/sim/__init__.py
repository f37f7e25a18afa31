"""The embedded cluster: an in-memory API server and the simulated parts around the binder.

memory (MemoryClient, the store) with watch, selectors, merge, objects, owners, conflicts;
clock, catalog, nodes, agent, kubelet, kubevirt, affinity, retry; invariants (DESIGN §2).
"""
