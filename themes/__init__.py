"""vibechat colour themes."""
