"""Companion tools the model calls: slicing an artifact and querying it (JMESPath, grep, SQL)."""
