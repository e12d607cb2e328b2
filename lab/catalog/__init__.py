"""The data catalog: every complete run folder under catalog/runs/, validated and flattened into one Parquet
table per row schema under catalog/tables/ (plus `runs`, one row per run folder, complete or not).

It may import the measurement parts (lab.measure), the core and lab.dvc_hostkeys; never an experiment, a presenter
or a report.
"""
