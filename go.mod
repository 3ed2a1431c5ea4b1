module github.com/fleetml/fleet

go 1.26
