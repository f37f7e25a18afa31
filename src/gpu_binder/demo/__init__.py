"""`gpu-binder demo`: the embedded cluster playing a scenario that shows every rule."""
