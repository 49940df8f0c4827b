"""Cluster control: controller election and its decisions, as pure functions where possible."""
