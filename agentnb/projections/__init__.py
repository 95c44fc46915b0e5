"""Pure folds of the log: state, transcript, tasks, pending requests, snapshots."""
