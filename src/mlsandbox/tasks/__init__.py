"""Kinds of work: what an agent is asked to produce, one package per kind."""
