module vroce.dev

go 1.26
