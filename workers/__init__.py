"""hookbus workers: the sync dispatcher, the handler runners and the arq tasks."""
