"""What the repair bot sees: the crash report built from a live crash, bounded summaries, redaction."""
