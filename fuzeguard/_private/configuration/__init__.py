"""Configuration: the keys and their defaults, config files, discovery, validation and trust."""
