"""The workload model: where every kind keeps its pod templates, and what they ask for."""
