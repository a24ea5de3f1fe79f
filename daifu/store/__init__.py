"""What a run keeps: experiment_record.log, repairs.jsonl, the workspace files."""
