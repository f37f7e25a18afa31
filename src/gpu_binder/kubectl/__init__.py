"""`kubectl gpu`: the cluster's GPUs as gpu-binder sees them, read with the caller's own
kubeconfig and rights (a kubectl plugin: the `kubectl-gpu` command; also `gpu-binder
status|vm|why|drain|check`).

One module per question: status.py (classes and nodes), vm.py (one VM's set and its
history), why.py (why it waits), drain.py (what a drain would do), check.py (does the
webhook answer); snapshot.py reads what they need, output.py prints as kubectl does.
"""
