"""One small module of request handlers per family of APIs."""
