"""Conversations: the session a chat or a run drives, its log, the SQLite history, batches of
prompts and titles. Talks to a model only through the turns.Backend protocol.
Imports the base, settings and turns.
"""
