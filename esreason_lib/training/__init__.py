"""What `train_es` and `train_grpo` share, one module per job: `settings` (the config fields every run has,
`RunSettings`, and which train examples each iteration draws; no model code, so a config imports no transformers),
`inputs` (the model, tokenizer, task and train examples a run starts from, and the checks they pass before its
directory exists), `run_entry` (a run's identity in the store, opening it, the snapshots it keeps) and `early_checks`
(the configs' field checks run on the command line's values before torch loads). The registry
of methods is `methods`, the finite-ness guards `guards`."""
