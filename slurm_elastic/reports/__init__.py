"""Allocation reports built from round records and accounting data."""
