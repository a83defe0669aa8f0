"""Trace-driven simulator: a virtual cluster as observer and actuator for the shared run_round."""
