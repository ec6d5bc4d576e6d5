module github.com/queuecore/queuecore-go

go 1.19
