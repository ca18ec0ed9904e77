"""The router: input topics -> routed topic by F(k), epoch markers, key statistics, dead letters."""
