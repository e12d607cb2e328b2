"""The core every other layer stands on: settings (defaults < params.yaml < LAB_* < flags), run folders, the
stored tables' schemas, statistics (one bootstrap, one verdict), the error base class, the console, the host shell
(local or over SSH), and what is recorded about a host and a checkout. It imports nothing of the lab outside itself."""
