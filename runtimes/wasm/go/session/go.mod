module kiln/session

go 1.21
