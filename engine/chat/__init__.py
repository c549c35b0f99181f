"""Conversations: the session a chat or a run drives, its log, the SQLite history, batches of
prompts and titles. Talks to a model only through the turns.Backend protocol.
Imports the base, settings and turns.

The session: session (``ChatSession``: a reply's lifecycle, the engine lock, the backend), turn
(a reply while it is generated, and how it went), writer (the session's hold on the writer lock),
titles (a conversation's title, from its first prompt or asked of the model).

The history: history (``History``: reads, writes, search),
database (the file, its opening and transactions, errors in words), schema (migrations),
records (the rows as values, the Markdown export), export (written whole or not at all),
reply_writer (a reply saved while it streams), convlock (one writer per conversation).
"""
