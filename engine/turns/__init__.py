"""A conversation's turns as every backend sees them: the Backend protocol and its events, how turns
become a prompt (prompt formats, chat templates, stop strings) and how a model's output becomes a
reply's parts (thinking, harmony channels).
Imports the base and settings.
"""
