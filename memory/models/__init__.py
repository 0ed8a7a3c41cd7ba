"""What a model file holds: its components, their bytes, dtypes and streamable blocks, read from the file's
header or from the catalog of known files."""
