"""`gpu-binder usage`: the billing ledger (GPUUsageRecords) as GPU-minutes per tenant.

ledger.py is the pure part (clipping records to a period and summing them per group),
source.py reads the records from the API, report.py prints them, command.py is the CLI.
"""
