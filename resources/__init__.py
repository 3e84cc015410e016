"""Icons, desktop metadata and preset data shipped with attnexplorer."""
