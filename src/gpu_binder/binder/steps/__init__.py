"""The steps of the binder's pass, in the seed's order (DESIGN §3). Each is pure of I/O."""
