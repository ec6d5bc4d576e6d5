DELETE FROM topic_traffic WHERE minute < now() - make_interval(secs => %(keep_s)s)
