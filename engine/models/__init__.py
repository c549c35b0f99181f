"""Model files: what --model names (resolve), the GGUF header check, vibechat's store, the Hub and
the downloader, other tools' folders, the starter, whether a model fits in memory.
Imports the base and settings; never libllama.
"""
