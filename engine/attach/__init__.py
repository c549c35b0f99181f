"""Attachments: reading the user's images and text files safely (a decompression bomb, a
truncated image, a FIFO, /dev/zero or a binary file is one line, never a hang), scaling images
before anything large is held, and keeping one private copy of each distinct file under the
data dir, by its content address.
Imports the base, settings and turns.
"""
