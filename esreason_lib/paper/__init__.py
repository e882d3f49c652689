"""The paper's harness, apart from the library: what tests arXiv 2608.27351's claims in miniature.

`studies/` (presets, specs, one module per notebook), `findings` and `intervals` (the checks and their 95% intervals),
`power` and `power_report` (operating characteristics), `theory` (Lemmas 1-3, Proposition 1), `analysis`, `plots`,
`claims` (papers/claims.md and the README table), `plan` (the prefill of a preset's runs), `notebooks` (papermill),
`splits` (the problem pools). The library (`esreason_lib` outside this folder) never imports it; `cli.py` reaches it
only inside the harness commands and for presets.
"""
